;; Errors as values a sysadmin can act on.

(import consfig.errors [CommandFailed site-location])

(defn test-a-failed-commands-message-names-command-code-and-where []
  (setv e (CommandFailed "ls -l /x" 2 "" "ls: cannot access '/x'\n" "ssh:root@db1"))
  (assert (= (.splitlines (str e))
             ["command failed with exit code 2 on ssh:root@db1: ls -l /x"
              "    ls: cannot access '/x'"])
          (str e)))

(defn test-a-failed-commands-message-keeps-only-the-last-lines []
  (setv e (CommandFailed "seq" 1 (.join "" (gfor i (range 50) f"{i}\n")) "" None)
        lines (.splitlines (str e)))
  (assert (in "30 earlier lines not shown" (get lines 1)) lines)
  (assert (= (.strip (get lines -1)) "49") lines))

(defn test-site-location-is-the-innermost-frame-in-site-code []
  ;; This test file is site code: Hy outside consfig, hy and hyrule.
  (try
    (int "not a number")
    (except [e ValueError]
      (setv where (site-location e))))
  (assert (.startswith where "test_errors.hy:") where))

(defn test-site-location-is-none-for-a-failure-inside-consfig []
  (import consfig.model.propspec [read-propspec])
  (try
    (read-propspec "(")
    (except [e Exception]
      ;; Without this test's own frame, the traceback is consfig's and hy's.
      (setv where (site-location (.with-traceback e e.__traceback__.tb-next)))))
  (assert (is where None) where))
