;; The reporter: what a person reads, rendered from events into a real rich
;; console that writes to a string.

(import io
        json
        consfig.deployer.report [Reporter JsonSink PlainConsole collapse-carriage-returns]
        rich.console [Console])

(defn render [events #** options]
  (setv out (io.StringIO)
        reporter (Reporter :console (Console :file out :width 200 :highlight False)
                           #** options))
  (for [e events] (reporter e))
  (.finish reporter)
  (.getvalue out))

(defn ev [kind depth #** fields]
  {"event" kind "host" (.get fields "host" "h") "depth" depth #** fields})

(defn lines [text]
  (.splitlines text))

(defn test-reporter-prints-nested-lines-under-a-heading []
  (setv text (render [(ev "start" 0 :desc "site")
                      (ev "start" 1 :desc "leaf")
                      (ev "end" 1 :desc "leaf" :status "changed")
                      (ev "end" 0 :desc "site" :status "changed")
                      (ev "summary" 0 :status "changed")]))
  (assert (= (cut (lines text) 3) ["h :: site" "h ::   leaf ... done" "h :: site ... done"])
          text)
  (assert (.startswith (get (lines text) 3) "h :: Changes were made.") text))

(defn test-summary-counts-each-status []
  (setv text (render [(ev "start" 0 :desc "a") (ev "end" 0 :desc "a" :status "ok")
                      (ev "start" 0 :desc "b") (ev "end" 0 :desc "b" :status "changed")
                      (ev "start" 0 :desc "c") (ev "end" 0 :desc "c" :status "changed")
                      (ev "end" 0 :desc "d" :status "skipped")
                      (ev "summary" 0 :status "changed")]))
  (assert (in "1 ok, 2 done, 0 failed, 1 skipped in " text) text))

(defn test-failure-reason-is-shown-under-its-line-and-again-at-the-end []
  (setv text (render [(ev "start" 0 :desc "x")
                      (ev "end" 0 :desc "x" :status "failed" :property "file.has-content"
                          :message "command failed\n  output")
                      (ev "summary" 0 :status "failed")]))
  (assert (= (cut (lines text) 3) ["h :: x ... failed" "h ::     command failed"
                                   "h ::       output"])
          text)
  (assert (in "Failures:\n  h :: file.has-content: command failed\n" text) text))

(defn test-site-location-follows-the-reason []
  (setv text (render [(ev "end" 0 :desc "x" :status "failed" :message "NameError: y"
                          :where "site.hy:12")]))
  (assert (in "h ::     (at site.hy:12)" text) text))

(defn test-command-output-is-shown-only-when-verbose []
  (setv events [(ev "start" 0 :desc "apt") (ev "output" 1 :text "Reading database" :stream "command")
                (ev "end" 0 :desc "apt" :status "changed")])
  (assert (not-in "Reading database" (render events)) "hidden by default")
  (assert (in "Reading database" (render events :verbosity 1)) "shown at -v"))

(defn test-notes-are-always-shown []
  (setv text (render [(ev "start" 0 :desc "svc") (ev "output" 1 :text "not started here")
                      (ev "end" 0 :desc "svc" :status "ok")]))
  (assert (in "not started here" text) text))

(defn test-progress-redrawn-with-carriage-returns-collapses []
  (assert (= (collapse-carriage-returns "5%\r50%\r100%") "100%") "last state")
  (assert (= (collapse-carriage-returns "done\r") "done") "trailing CR")
  (setv text (render [(ev "output" 0 :text "(Reading 5%\r(Reading 100%\n") ] :verbosity 1))
  (assert (in "(Reading 100%" text) text)
  (assert (not-in "5%" text) text))

(defn test-diffs-are-shown-with-diff-or-verbose []
  (setv events [(ev "diff" 1 :path "/f" :text "-old\n+new\n")])
  (assert (not-in "+new" (render events)) "hidden by default")
  (assert (in "+new" (render events :diff True)) "--diff")
  (assert (in "+new" (render events :verbosity 1)) "-v"))

(defn test-durations-and-slowest-at-verbose []
  (setv events [(ev "start" 0 :desc "a") (ev "end" 0 :desc "a" :status "ok")])
  (assert (in "Slowest:" (render events :verbosity 1)) "-v lists the slowest")
  (assert (not-in "Slowest:" (render events)) "not by default"))

(defn test-several-hosts-get-a-recap-table []
  (setv text (render [(ev "end" 0 :host "a" :desc "x" :status "changed")
                      (ev "summary" 0 :host "a" :status "changed")
                      (ev "end" 0 :host "b" :desc "x" :status "failed" :message "m")
                      (ev "summary" 0 :host "b" :status "failed")]))
  (assert (in "Recap" text) text)
  (assert (any (gfor l (lines text) (and (.startswith (.strip (.lstrip l "│ ")) "b")
                                         (in "failed" l))))
          text))

(defn grouped-hosts [console]
  ;; Two hosts side by side, their events interleaved.
  (setv reporter (Reporter :console console))
  (.grouping reporter True)
  (for [e [(ev "start" 0 :host "a" :desc "x")
           (ev "start" 0 :host "b" :desc "x")
           (ev "end" 0 :host "b" :desc "x" :status "ok")
           (ev "end" 0 :host "a" :desc "x" :status "changed")
           (ev "start" 0 :host "a" :desc "y")
           (ev "end" 0 :host "a" :desc "y" :status "ok")
           (ev "summary" 0 :host "a" :status "changed")
           (ev "summary" 0 :host "b" :status "no-change")]]
    (reporter e))
  (.close reporter))

(defn test-hosts-side-by-side-print-their-lines-together-when-each-ends []
  (for [plain [False True]]
    (setv out (io.StringIO))
    (grouped-hosts (if plain
                       (PlainConsole out)
                       (Console :file out :width 200 :highlight False)))
    (setv got (lfor l (lines (.getvalue out)) (get (.split l "  ") 0)))
    (assert (= got ["a :: x ... done" "a :: y ... ok" "a :: Changes were made."
                    "b :: x ... ok" "b :: No changes were made."])
            f"plain={plain}: {(.getvalue out)}")))

(defn test-one-host-has-no-recap []
  (assert (not-in "Recap" (render [(ev "summary" 0 :status "no-change")])) "one host"))

(defn test-check-mode-statuses-and-summary []
  (setv text (render [(ev "end" 0 :desc "f" :status "would-change")
                      (ev "end" 0 :desc "c" :status "cannot-check")
                      (ev "summary" 0 :status "changed")]
                     :check True))
  (assert (in "h :: f ... would change" text) text)
  (assert (in "h :: c ... cannot check" text) text)
  (assert (in "Changes would be made." text) text))

(defn test-json-sink-writes-one-parseable-line-per-event []
  (setv out (io.StringIO)
        sink (JsonSink out))
  (sink (ev "start" 0 :desc "a\nb"))
  (sink (ev "summary" 0 :status "changed" :changes 1 :failures 0))
  (setv parsed (lfor l (.splitlines (.getvalue out)) (json.loads l)))
  (assert (= (lfor p parsed (get p "event")) ["start" "summary"]) parsed)
  (assert (= (get (get parsed 0) "desc") "a\nb") parsed)
  (assert (in "time" (get parsed 1)) parsed))

(defn test-commands-as-they-run-are-shown-at-vv-only []
  (setv events [(ev "output" 1 :text "$ apt-get update" :stream "run")])
  (assert (not-in "apt-get" (render events :verbosity 1)) "not at -v")
  (assert (in "$ apt-get update" (render events :verbosity 2)) "at -vv"))

(defn test-the-live-line-shows-host-progress-current-property-and-elapsed-time []
  (setv out (io.StringIO)
        reporter (Reporter :console (Console :file out :width 200 :force-terminal True)))
  (.expect reporter "h" 3)
  (reporter (ev "start" 0 :desc "a"))
  (reporter (ev "end" 0 :desc "a" :status "ok"))
  (reporter (ev "start" 0 :desc "b is slow"))
  (setv line (str (.__rich__ (hy.I.consfig/deployer/report._Progress reporter))))
  (.close reporter)
  (assert (.startswith line "h: 1/3 done; applying b is slow (") line)
  (assert (.endswith line " s)") line))

(defn recap-on-a-plain-stream [check]
  (setv out (io.StringIO)
        reporter (Reporter :console (PlainConsole out) :check check))
  (for [e [(ev "end" 0 :host "a" :desc "x" :status (if check "would-change" "changed"))
           (ev "summary" 0 :host "a" :status "changed")
           (ev "end" 0 :host "b" :desc "x" :status "ok")
           (ev "summary" 0 :host "b" :status "no-change")]]
    (reporter e))
  (.finish reporter)
  (get (.split (.getvalue out) "Recap" 1) 1))

(defn test-the-recap-on-a-plain-stream-shows-whole-headers-and-no-would-columns-outside-a-check []
  (setv recap (recap-on-a-plain-stream False))
  (assert (in "changed" recap) recap)
  (assert (not-in "…" recap) recap)
  (assert (not-in "would" recap) recap))

(defn test-the-recap-of-a-check-shows-the-would-change-column []
  (setv recap (recap-on-a-plain-stream True))
  (assert (in "would-change" recap) recap)
  (assert (not-in "…" recap) recap))
