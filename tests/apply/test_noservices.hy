;; Where no service may start (consfig.apply.noservices): the reason a
;; connection's chain gives, and the policy-rc.d scripts, run for real.

(import os
        subprocess
        harness [unavailable]
        consfig.apply.noservices [POLICY-RC-D FORBID-ALL WHILE-CHROOTED no-services-reason]
        consfig.transport.hop [Connection]
        consfig.transport.local [LocalConnection])

(defn chain [#* reasons]
  ;; A chain of connections, outermost first, each with its no-services
  ;; connattr (None: unset); the innermost.
  (setv conn None)
  (for [r reasons]
    (setv conn (if conn (Connection conn) (LocalConnection)))
    (when (is-not r None)
      (setv (get conn.connattrs "no-services") r)))
  conn)

(defn test-no-reason-when-nothing-in-the-chain-says-so []
  (assert (is (no-services-reason (chain None None None)) None) "None"))

(defn test-no-reason-without-a-connection []
  (assert (is (no-services-reason None) None) "None"))

(defn test-a-connections-own-reason-is-given []
  (assert (= (no-services-reason (chain "in a chroot")) "in a chroot") "its reason"))

(defn test-a-reason-of-a-hop-further-up-the-chain-holds-for-the-hops-inside-it []
  (assert (= (no-services-reason (chain None "in a chroot" None None)) "in a chroot")
          "every hop after the chroot runs inside it"))

(defn test-the-nearest-hops-reason-is-given []
  (assert (= (no-services-reason (chain "outer" "inner" None)) "inner") "the nearest"))

(defn test-a-reason-that-is-not-text-reads-as-here []
  (assert (= (no-services-reason (chain True)) "here") "True")
  (assert (= (no-services-reason (chain None 1)) "here") "any true value"))

(defn test-a-false-or-empty-reason-is-no-reason []
  (assert (is (no-services-reason (chain False "" None)) None) "False and \"\" say nothing")
  (assert (= (no-services-reason (chain "in a chroot" "")) "in a chroot")
          "an empty one does not hide one further up"))

(defn test-the-policy-file-is-the-one-invoke-rc-d-asks []
  (when (not (os.path.exists "/usr/sbin/invoke-rc.d"))
    (unavailable "no invoke-rc.d here (Debian: init-system-helpers)"))
  (with [f (open "/usr/sbin/invoke-rc.d")]
    (assert (in (+ "$DPKG_ROOT" POLICY-RC-D) (.read f)) f"invoke-rc.d asks {POLICY-RC-D}")))

(defn run-policy [tmp-path text #* args]
  (setv p (/ tmp-path "policy-rc.d"))
  (.write-text p text)
  (os.chmod p 0o755)
  (. (subprocess.run [(str p) #* args] :capture-output True :timeout 30) returncode))

(defn test-forbid-all-forbids-every-action [tmp-path]
  (for [args [["nginx" "start"] ["ssh" "restart"] ["--quiet" "x" "stop"] []]]
    (assert (= (run-policy tmp-path FORBID-ALL #* args) 101) f"101, action forbidden: {args}")))

(defn test-while-chrooted-forbids-every-action [tmp-path]
  (assert (= (run-policy tmp-path WHILE-CHROOTED "nginx" "start") 101) "101, action forbidden"))

(defn test-the-two-policies-are-told-apart-by-their-content []
  (assert (!= FORBID-ALL WHILE-CHROOTED) "a host's policy and a chroot hop's differ")
  (for [text [FORBID-ALL WHILE-CHROOTED]]
    (assert (.startswith text "#!/bin/sh\n") "a shell script")
    (assert (in "consfig" text) "saying who wrote it")
    (assert (.endswith text "\n") "ending its last line")))
