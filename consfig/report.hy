"Rendering the engine's events for people (rich) and for programs (JSON lines).

`Reporter` prints one line per announced property, `host :: description ...
status`, children indented under a heading for their parent, a failure's
reason under its line, and a closing summary with counts; the failures are
repeated at the end, and with several hosts a recap table follows.  On a
terminal a live line shows the host, how many properties are done, the one
being applied and for how long.  What is shown grows with the verbosity:

  0   one line per property; notes; a failure's reason (a failing command's
      last lines)
  -v  the output of commands that succeeded, diffs, tracebacks of bugs, each
      property's duration and the five slowest
  -vv the commands as they are run
  -vvv the frames of the :python hop's conversation with the target

`JsonSink` writes every event as one JSON object per line (see
`consfig.events` and the README for the fields)."

(import json
        sys
        time
        rich.console [Console]
        rich.table [Table]
        rich.text [Text]
        consfig.terminal [collapse-carriage-returns printable printable-event])

(setv STATUS-WORDS {"ok" #("ok" "green")
                    "changed" #("done" "bold yellow")
                    "failed" #("failed" "bold red")
                    "skipped" #("skipped" "dim")
                    "would-change" #("would change" "bold yellow")
                    "cannot-check" #("cannot check" "magenta")})

(setv SUMMARIES {"no-change" #("No changes were made." "green")
                 "changed" #("Changes were made." "bold yellow")
                 "failed" #("There were failures." "bold red")})

(setv CHECK-SUMMARIES {"no-change" #("Nothing would change." "green")
                       "changed" #("Changes would be made." "bold yellow")
                       "failed" #("There were failures." "bold red")})

;; The order counts are given in, in a summary.
(setv COUNTED ["ok" "changed" "would-change" "cannot-check" "failed" "skipped"])

(setv OUTPUT-VERBOSITY {"note" 0 "command" 1 "run" 2 "wire" 3})

(defclass _Progress []
  ;; The live line's text, computed whenever rich redraws it, so that the
  ;; elapsed time of a long property keeps counting.
  (defn __init__ [self reporter]
    (setv self.reporter reporter))
  (defn __rich__ [self]
    (setv r self.reporter
          total (if r.total f"/{r.total}" "")
          elapsed (- (time.monotonic) r.current-since))
    (Text f"{r.current-host}: {r.done}{total} done; applying {r.current} ({elapsed :.1f} s)")))

(defclass Reporter []
  "A sink for engine events that prints them as they come.  Call `finish`
after the last deployment to print the failures again and, for several
hosts, the recap."

  (defn __init__ [self [console None] [verbosity 0] [diff False] [check False]]
    (setv self.console (or console (Console :highlight False :soft-wrap True))
          self.verbosity verbosity
          self.show-diffs (or diff (>= verbosity 1))
          self.check check
          ;; Announced properties started but not ended:
          ;; [depth desc heading-shown? start-time]
          self.open []
          self.status None
          self.hosts {}
          self.failures []
          self.durations []
          self.total None
          self.done 0
          self.current None
          self.current-host ""
          self.current-since (time.monotonic)))

  (defn expect [self host total]
    "HOST is about to be applied, with TOTAL announced properties."
    (setv self.total total
          self.done 0))

  (defn __call__ [self event]
    ;; Event text comes from the target: neutralised here, once, before any
    ;; of it is rendered.  Text objects are never parsed as markup.
    (setv event (printable-event event)
          kind (get event "event")
          host (.get event "host" ""))
    (when (not-in host self.hosts)
      (setv (get self.hosts host) {"counts" (dfor s COUNTED s 0)
                                   "started" (time.monotonic)
                                   "status" None}))
    (cond (= kind "start") (self._start event)
          (= kind "end") (self._end event)
          (= kind "output") (self._output event)
          (= kind "diff") (self._diff event)
          (= kind "summary") (self._summary event)))

  (defn _prefix [self event [depth None]]
    (Text.assemble #((str (.get event "host" "")) "bold")
                   " :: "
                   (* "  " (if (is depth None) (get event "depth") depth))))

  (defn _print [self text]
    (.print self.console text))

  (defn _show-open [self event]
    ;; A property's heading is printed once something happens inside it.
    (for [entry self.open]
      (when (not (get entry 2))
        (self._print (+ (self._prefix event (get entry 0)) (Text (get entry 1))))
        (setv (get entry 2) True))))

  (defn _start [self event]
    (self._show-open event)
    (.append self.open [(get event "depth") (get event "desc") False (time.monotonic)])
    (setv self.current (get event "desc")
          self.current-host (.get event "host" "")
          self.current-since (time.monotonic))
    (self._spin))

  (defn _end [self event]
    (setv status (get event "status")
          duration None)
    (if (and self.open (!= status "skipped")
             (= (get (get self.open -1) 0) (get event "depth")))
        (setv duration (- (time.monotonic) (get (.pop self.open) 3)))
        ;; The end of a property inside open ones (a failure, a skip, an
        ;; unannounced property): their headings first.
        (self._show-open event))
    (+= (get (get self.hosts (.get event "host" "")) "counts" status) 1)
    (+= self.done 1)
    (setv #(word style) (get STATUS-WORDS status)
          line (+ (self._prefix event) (Text (get event "desc")) " ... "
                  (Text word :style style)))
    (when (is-not duration None)
      (.append self.durations #(duration (.get event "host" "") (get event "desc")))
      (when (>= self.verbosity 1)
        (.append line (Text f" ({duration :.2f} s)" :style "dim"))))
    (self._print line)
    (when (.get event "message")
      (.append self.failures event)
      (self._indented event (self._reason event) "red"))
    (when (and (.get event "traceback") (>= self.verbosity 1))
      (self._indented event (get event "traceback") "dim")))

  (defn _reason [self event]
    (+ (get event "message")
       (if (.get event "where") f"\n(at {(get event "where")})" "")))

  (defn _indented [self event text style [extra 2]]
    ;; Under the property's line: EXTRA levels deeper than the event (an end
    ;; event is at its property's depth; an output event already one below).
    ;; Split on newlines only: splitlines would also split on the carriage
    ;; returns that redraw a progress line.
    (for [line (.split (.rstrip text "\n") "\n")]
      (self._print (+ (self._prefix event (+ (get event "depth") extra))
                      (Text (collapse-carriage-returns line) :style style)))))

  (defn _output [self event]
    ;; Notes are always shown; a command's output only at -v (a failing
    ;; command's last lines are part of its failure's reason), the
    ;; commands as they run at -vv.
    (when (>= self.verbosity (get OUTPUT-VERBOSITY (.get event "stream" "note")))
      (self._show-open event)
      (self._indented event (get event "text") "dim" 1)))

  (defn _diff [self event]
    (when self.show-diffs
      (self._show-open event)
      (for [line (.splitlines (get event "text"))]
        (self._print
          (+ (self._prefix event (+ (get event "depth") 1))
             (Text line :style (cond (.startswith line "+") "green"
                                     (.startswith line "-") "red"
                                     True "dim")))))))

  (defn _counts [self host]
    (setv record (get self.hosts host)
          counts (get record "counts")
          shown (lfor s COUNTED
                      :if (or (get counts s) (in s #("ok" "failed")))
                      f"{(get counts s)} {(get (get STATUS-WORDS s) 0)}")
          seconds (- (time.monotonic) (get record "started")))
    f"{(.join ", " shown)} in {seconds :.1f} s")

  (defn _summary [self event]
    (self._stop-spinner)
    (setv host (.get event "host" "")
          (get (get self.hosts host) "status") (get event "status")
          #(text style) (get (if self.check CHECK-SUMMARIES SUMMARIES) (get event "status")))
    (self._print (+ (self._prefix event 0) (Text text :style style)
                    "  " (Text (self._counts host) :style "dim"))))

  (defn finish [self]
    "Print what a reader wants at the end: the slowest properties (at -v),
every failure again, and a recap of the hosts when there were several."
    (self._stop-spinner)
    (when (and (>= self.verbosity 1) self.durations)
      (self._print (Text "Slowest:" :style "bold"))
      (for [[d host desc] (cut (sorted self.durations :reverse True) 5)]
        (self._print (Text f"  {d :8.2f} s  {host} :: {desc}"))))
    (when self.failures
      (self._print (Text "Failures:" :style "bold red"))
      (for [e self.failures]
        (setv first-line (get (+ (.splitlines (get e "message")) [""]) 0))
        (self._print (Text.assemble "  " #((.get e "host" "") "bold") " :: "
                                    (.get e "property" (get e "desc")) ": " first-line))))
    (when (> (len self.hosts) 1)
      (setv table (Table :title "Recap" :title-justify "left"))
      (for [column ["host" "status" #* COUNTED]]
        (.add-column table column :justify (if (in column #("host" "status")) "left" "right")))
      (for [[host record] (.items self.hosts)]
        (.add-row table (Text host) (or (get record "status") "not finished")
                  #* (gfor s COUNTED (str (get (get record "counts") s)))))
      (.print self.console table)))

  (defn _spin [self]
    (when self.console.is-terminal
      (when (not self.status)
        (setv self.status (.status self.console (_Progress self)))
        (.start self.status))))

  (defn _stop-spinner [self]
    (when self.status
      (.stop self.status)
      (setv self.status None)))

  (defn close [self]
    (self._stop-spinner)))

(defclass JsonSink []
  "A sink that writes each event as one line of JSON to STREAM, stamped with
the time (seconds since the epoch) as \"time\"."
  (defn __init__ [self [stream None]]
    (setv self.stream (or stream sys.stdout)))
  (defn __call__ [self event]
    (.write self.stream (+ (json.dumps {#** event "time" (round (time.time) 3)}
                                       :ensure-ascii False :default str)
                           "\n"))
    (.flush self.stream))
  (defn finish [self] None)
  (defn close [self] None))

(defn error [message [console None]]
  "Print a user-facing error MESSAGE."
  (.print (or console (Console :stderr True :highlight False :soft-wrap True))
          (Text.assemble #("consfig: error: " "bold red") (printable (str message)))))

(export :objects [Reporter JsonSink error collapse-carriage-returns])
