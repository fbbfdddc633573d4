"Rendering the engine's events for people (rich) and for programs (JSON lines).

`Reporter` prints one line per announced property, `host :: description ...
status`, children indented under a heading for their parent, a failure's
reason under its line, and a closing summary with counts; the failures are
repeated at the end, and with several hosts a recap table follows.  On a
terminal a live line shows the host, how many properties are done, the one
being applied and for how long.  Hosts deployed side by side (`grouping`)
print each host's lines together when it ends, and on a terminal a live
table shows one row per host still running.  What is shown grows with the
verbosity:

  0   one line per property; notes; a failure's reason (a failing command's
      last lines)
  -v  the output of commands that succeeded, diffs, tracebacks of bugs, each
      property's duration and the five slowest, each item of prerequisite
      data sent to the target
  -vv the commands as they are run
  -vvv the frames of the :python hop's conversation with the target

`JsonSink` writes every event as one JSON object per line (see
`consfig.apply.events` and docs/guide/json-events.md for the fields).

Output that is not a terminal (a pipe, a file, a CI log) has no colour and
no live line, and is written without rich, which a controller then never
imports: it costs a tenth of the start-up of `consfig deploy`."

(import json
        os
        sys
        threading
        time
        consfig.deployer.terminal [collapse-carriage-returns printable printable-event])

(defclass PlainText []
  "The little of rich's `Text` a line of the report needs, without styles:
what is printed where there is no terminal to show them."
  (defn __init__ [self [text ""] * [style None]]
    (setv self.plain (str text)))
  (defn [classmethod] assemble [cls #* parts]
    (cls (.join "" (gfor p parts (if (isinstance p tuple) (get p 0) (str p))))))
  (defn _plain [self other]
    (if (isinstance other PlainText) other.plain (str other)))
  (defn __add__ [self other]
    (PlainText (+ self.plain (self._plain other))))
  (defn append [self text [style None]]
    (+= self.plain (self._plain text))
    self)
  (defn join [self lines]
    (PlainText (.join self.plain (gfor l lines (self._plain l)))))
  (defn __str__ [self] self.plain))

(defclass PlainConsole []
  "A console for output that is not a terminal: each line written whole,
tabs expanded as rich would, to STREAM (by default whatever `sys.stdout` or,
with STDERR, `sys.stderr` is when a line is printed)."
  (setv is-terminal False)
  (defn __init__ [self [stream None] * [stderr False]]
    (setv self._stream stream
          self.stderr stderr))
  (defn [property] file [self]
    (or self._stream (if self.stderr sys.stderr sys.stdout)))
  (defn print [self text]
    (setv f self.file)
    (.write f (+ (.expandtabs (str text) 8) "\n"))
    (.flush f)))

(defn _terminal? [stream]
  (or (bool (.get os.environ "FORCE_COLOR"))
      (try (.isatty stream) (except [Exception] False))))

(defn default-console [[stderr False]]
  "A rich `Console` on a terminal (stdout, or STDERR), else a `PlainConsole`."
  (if (_terminal? (if stderr sys.stderr sys.stdout))
      (do (import rich.console [Console])  ; lazy: the controller's
          (Console :stderr stderr :highlight False :soft-wrap True))
      (PlainConsole :stderr stderr)))

(defn _text-class [console]
  (if (isinstance console PlainConsole)
      PlainText
      (do (import rich.text [Text]) Text)))  ; lazy: the controller's

(setv STATUS-WORDS {"ok" #("ok" "green")
                    "changed" #("done" "bold yellow")
                    "failed" #("failed" "bold red")
                    "skipped" #("skipped" "dim")
                    "would-change" #("would change" "bold yellow")
                    "cannot-check" #("cannot check" "magenta")})

(setv CONVERGE-STYLES {"drift" "bold yellow" "repaired" "green" "failed" "bold red"
                       "applied" "green" "retracted" "green" "repeated" "bold red" "log" "bold red"
                       "fight" "bold red" "rescan" "cyan" "watching" "cyan" "stopped" "dim"
                       "replaced" "cyan" "superseded" "bold yellow" "not-kept" "yellow"
                       "waiting" "yellow"})

(defn converge-text [event]
  "What follows the kind of an agent's event, as a line says it."
  (setv what (get event "what"))
  (cond (= what "watching")
        f": {(.get event "properties" 0)} properties, {(.get event "watches" 0)} watches"
        (and (= what "fight") (.get event "flaps"))
        (+ f": {(.get event "desc" "")}: its fact flaps, evaluated {(.get event "burst")} times "
           f"in a row; next in {(.get event "retry-in")} s")
        (= what "fight")
        (+ f": {(.get event "desc" "")}: repaired {(.get event "burst")} times in a row, "
           f"something keeps undoing it; next repair in {(.get event "retry-in")} s")
        (in what #("rescan" "replaced" "superseded" "not-kept" "waiting")) f": {(.get event "why" "")}"
        (= what "repeated")
        f": {(.get event "desc" "")}: {(.get event "of")} {(.get event "count")} more times, as said"
        (= what "stopped")
        f": {(.get event "repairs" 0)} repairs, {(.get event "failures" 0)} failures"
        (.get event "desc") (+ f": {(get event "desc")}"
                               (if (.get event "explanation") f" ({(get event "explanation")})" ""))
        True ""))

(setv SUMMARIES {"no-change" #("No changes were made." "green")
                 "changed" #("Changes were made." "bold yellow")
                 "failed" #("There were failures." "bold red")
                 "not-started" #("Not started: too many hosts failed (--max-fail)." "dim")})

(setv CHECK-SUMMARIES {"no-change" #("Nothing would change." "green")
                       "changed" #("Changes would be made." "bold yellow")
                       "failed" #("There were failures." "bold red")
                       "not-started" #("Not started: too many hosts failed (--max-fail)." "dim")})

;; The order counts are given in, in a summary.
(setv COUNTED ["ok" "changed" "would-change" "cannot-check" "failed" "skipped"])

(setv OUTPUT-VERBOSITY {"note" 0 "progress" 0 "command" 1 "data" 1 "run" 2 "wire" 3})

(defclass _Progress []
  ;; The live line's text, computed whenever rich redraws it, so that the
  ;; elapsed time of a long property keeps counting.  It reads the
  ;; reporter's state without its lock: rich draws holding the console's
  ;; lock, which a thread holding the reporter's may be waiting for.
  (defn __init__ [self reporter]
    (setv self.reporter reporter))
  (defn __rich__ [self]
    (import rich.text [Text])  ; lazy: the controller's
    (setv record (.get self.reporter.hosts self.reporter.current-host))
    (if (or (not record) (not (get record "current")))
        (Text "")
        (Text f"{self.reporter.current-host}: {(_done record)} done; applying {(get record "current")} ({(_elapsed record) :.1f} s)"))))

(defclass _FleetTable []
  ;; The live table of the hosts being deployed side by side.
  (defn __init__ [self reporter]
    (setv self.reporter reporter))
  (defn __rich__ [self]
    (import rich.table [Table])  ; lazy: the controller's
    (setv records (list (.items self.reporter.hosts))
          records (lfor [h r] records :if (is (get r "parent") None) #(h r))
          running (lfor [h r] records :if (is (get r "status") None) #(h r))
          table (Table :title f"{(- (len records) (len running))}/{(len records)} hosts finished"
                       :title-justify "left" :box None :pad-edge False))
    (for [c ["host" "progress" "status" "applying"]]
      (.add-column table c :no-wrap True :overflow "ellipsis"))
    (for [[host r] running]
      (.add-row table host (_done r) (get r "state")
                (if (get r "current") f"{(get r "current")} ({(_elapsed r) :.1f} s)" "")))
    table))

(defn _done [record]
  (+ (str (get record "done")) (if (get record "total") f"/{(get record "total")}" "")))

(defn _elapsed [record]
  (- (time.monotonic) (get record "since")))

(defclass Reporter []
  "A sink for engine events that prints them as they come.  Call `finish`
after the last deployment to print the failures again and, for several
hosts, the recap.

Events may come from several threads (hosts deployed side by side): each is
handled whole under one lock.  With `grouping` on, each host's lines are
kept until its deployment ends and then printed together, so that hosts
never interleave line by line; on a terminal a live table shows the hosts
still running."

  (defn __init__ [self [console None] [verbosity 0] [diff False] [check False] * [options None]]
    ;; OPTIONS, the run's `RunOptions`, say VERBOSITY, DIFF and CHECK.
    (when options
      (setv verbosity options.verbosity diff options.diff check options.check))
    (setv self.console (or console (default-console))
          ;; Asked once: rich looks at the environment and the stream each time.
          self.live? self.console.is-terminal
          self.Text (_text-class self.console)
          self.verbosity verbosity
          self.show-diffs (or diff (>= verbosity 1))
          self.check check
          self.lock (threading.RLock)
          self.grouped False
          self.status None
          ;; hostname -> what is known of its deployment: counts, status,
          ;; the announced properties started but not ended (`open`: [depth
          ;; desc heading-shown? start-time]), progress, and (grouping) the
          ;; lines kept until it ends.
          self.hosts {}
          self.failures []
          self.durations []
          ;; thread id -> the host it reported last, to find a nested host's parent.
          self.threads {}
          self.current-host ""))

  (defn grouping [self on]
    "Keep each host's lines until its deployment ends (ON), or print them
as they come."
    (setv self.grouped (bool on)))

  (defn _record [self host]
    (when (not-in host self.hosts)
      (setv (get self.hosts host) {"counts" (dfor s COUNTED s 0)
                                   "started" (time.monotonic)
                                   "status" None
                                   "state" "connecting"
                                   "open" []
                                   "total" None
                                   "done" 0
                                   "current" None
                                   "since" (time.monotonic)
                                   "lines" []
                                   "parent" None}))
    (get self.hosts host))

  (defn _nested [self host depth]
    ;; A host first seen inside a property (DEPTH > 0) is deployed by
    ;; another (`deploys`, a chroot, a container): it has no summary of its
    ;; own.  Its parent is the host with a property open just above it; of
    ;; several (hosts side by side), the one this thread reported last.
    (when (and (> depth 0) (not-in host self.hosts))
      (setv candidates (lfor [h r] (.items self.hosts)
                             :if (and (get r "open") (= (get (get (get r "open") -1) 0) (- depth 1)))
                             h)
            mine (.get self.threads (threading.get-ident)))
      (when candidates
        (setv (get (self._record host) "parent")
              (if (in mine candidates) mine (get candidates 0))))))

  (defn _top [self host]
    ;; The host whose deployment HOST's lines are part of.
    (setv seen #{})
    (while (and (in host self.hosts) (get (get self.hosts host) "parent") (not-in host seen))
      (.add seen host)
      (setv host (get (get self.hosts host) "parent")))
    host)

  (defn expect [self host total]
    "HOST is about to be applied, with TOTAL announced properties."
    (with [self.lock]
      (setv record (self._record host)
            (get record "total") total
            (get record "done") 0
            (get record "started") (time.monotonic))
      ;; One host alone shows its live line from its first property on:
      ;; while it connects, a hop may be asking for a password.
      (when self.grouped (self._spin))))

  (defn __call__ [self event]
    ;; Event text comes from the target: neutralised here, once, before any
    ;; of it is rendered.  Text objects are never parsed as markup.
    (with [self.lock]
      (setv event (printable-event event)
            kind (get event "event"))
      (self._nested (.get event "host" "") (.get event "depth" 0))
      (self._record (.get event "host" ""))
      (when (is (get (self._record (.get event "host" "")) "parent") None)
        (setv (get self.threads (threading.get-ident)) (.get event "host" "")))
      (cond (= kind "start") (self._start event)
            (= kind "end") (self._end event)
            (= kind "output") (self._output event)
            (= kind "diff") (self._diff event)
            (= kind "summary") (self._summary event)
            (= kind "converge") (self._converge event))))

  (defn _converge [self event]
    ;; The agent's own lines: when, what, about which property.
    (setv what (get event "what")
          style (.get CONVERGE-STYLES what "bold")
          line (+ (self._prefix event 0)
                  (self.Text (time.strftime "%H:%M:%S " (time.localtime (.get event "time" (time.time))))
                             :style "dim")
                  (self.Text (if (.get event "noop") "drift (noop)" what) :style style)
                  (self.Text (converge-text event))))
    (self._print line)
    (when (.get event "message")
      (self._indented event (get event "message") "red" 1))
    (when (and self.show-diffs (.get event "diff"))
      (self._indented event (get event "diff") "dim" 1)))

  (defn _prefix [self event [depth None]]
    (.assemble self.Text #((str (.get event "host" "")) "bold")
                   " :: "
                   (* "  " (if (is depth None) (get event "depth") depth))))

  (defn _print [self text [host None]]
    (if (and self.grouped (is-not host None))
        (.append (get (self._record (self._top host)) "lines") text)
        (.print self.console text)))

  (defn _show-open [self event]
    ;; A property's heading is printed once something happens inside it.
    (setv host (.get event "host" ""))
    (for [entry (get (self._record host) "open")]
      (when (not (get entry 2))
        (self._print (+ (self._prefix event (get entry 0)) (self.Text (get entry 1))) host)
        (setv (get entry 2) True))))

  (defn _start [self event]
    (self._show-open event)
    (setv host (.get event "host" "")
          record (self._record host))
    (.append (get record "open") [(get event "depth") (get event "desc") False (time.monotonic)])
    (setv (get record "current") (get event "desc")
          (get record "state") "applying"
          (get record "since") (time.monotonic)
          self.current-host host)
    (self._spin))

  (defn _end [self event]
    (setv status (get event "status")
          host (.get event "host" "")
          record (self._record host)
          open (get record "open")
          duration None)
    (if (and open (!= status "skipped")
             (= (get (get open -1) 0) (get event "depth")))
        (setv duration (- (time.monotonic) (get (.pop open) 3)))
        ;; The end of a property inside open ones (a failure, a skip, an
        ;; unannounced property): their headings first.
        (self._show-open event))
    (+= (get record "counts" status) 1)
    (+= (get record "done") 1)
    (when (= status "failed") (setv (get record "state") "failing"))
    (setv #(word style) (get STATUS-WORDS status)
          line (+ (self._prefix event) (self.Text (get event "desc")) " ... "
                  (self.Text word :style style)))
    (when (is-not duration None)
      (.append self.durations #(duration host (get event "desc")))
      (when (>= self.verbosity 1)
        (.append line (self.Text f" ({duration :.2f} s)" :style "dim"))))
    (self._print line host)
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
                      (self.Text (collapse-carriage-returns line) :style style))
                   (.get event "host" ""))))

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
             (self.Text line :style (cond (.startswith line "+") "green"
                                     (.startswith line "-") "red"
                                     True "dim")))
          (.get event "host" "")))))

  (defn _counts [self host]
    (setv record (get self.hosts host)
          counts (get record "counts")
          shown (lfor s COUNTED
                      :if (or (get counts s) (in s #("ok" "failed")))
                      f"{(get counts s)} {(get (get STATUS-WORDS s) 0)}")
          seconds (- (time.monotonic) (get record "started")))
    f"{(.join ", " shown)} in {seconds :.1f} s")

  (defn _summary [self event]
    (setv host (.get event "host" "")
          record (self._record host)
          status (get event "status")
          (get record "status") status
          (get record "current") None
          #(text style) (get (if self.check CHECK-SUMMARIES SUMMARIES) status))
    (when (not self.grouped) (self._stop-spinner))
    (self._nested-ended host)
    (self._print (+ (self._prefix event 0) (self.Text text :style style)
                    (if (= status "not-started")
                        ""
                        (+ (self.Text "  ") (self.Text (self._counts host) :style "dim"))))
                 host)
    (self._flush host))

  (defn _nested-ended [self host]
    ;; HOST's deployment ended, and with it those it deployed: each is
    ;; done as its own properties went.
    (for [[h r] (list (.items self.hosts))]
      (when (and (= (get r "parent") host) (is (get r "status") None))
        (setv counts (get r "counts")
              (get r "status") (cond (get counts "failed") "failed"
                                     (or (get counts "changed") (get counts "would-change")) "changed"
                                     True "no-change")
              (get r "current") None)
        (self._nested-ended h))))

  (defn _flush [self host]
    ;; A host's kept lines, printed together now that it has ended.
    (setv record (self._record host)
          lines (get record "lines"))
    (setv (get record "lines") [])
    ;; In one print: rich spends more on each call than on a line.
    (when lines
      (.print self.console (.join (self.Text "\n") lines))))

  (defn finish [self]
    "Print what a reader wants at the end: the slowest properties (at -v),
every failure again, and a recap of the hosts when there were several."
    (with [self.lock]
      (self._stop-spinner)
      (for [host (list self.hosts)]
        (self._flush host))
      (when (and (>= self.verbosity 1) self.durations)
        (.print self.console (self.Text "Slowest:" :style "bold"))
        (for [[d host desc] (cut (sorted self.durations :reverse True) 5)]
          (.print self.console (self.Text f"  {d :8.2f} s  {host} :: {desc}"))))
      (when self.failures
        (.print self.console (self.Text "Failures:" :style "bold red"))
        (for [e self.failures]
          ;; The whole reason: a failing command's own words are on the
          ;; lines after the first.
          (setv #(first-line #* rest) (+ (.split (.rstrip (self._reason e) "\n") "\n") [""]))
          (.print self.console (.assemble self.Text "  " #((.get e "host" "") "bold") " :: "
                                          (.get e "property" (get e "desc")) ": "
                                          (collapse-carriage-returns first-line)))
          (for [line (cut rest 0 -1)]
            (.print self.console (self.Text (+ "      " (collapse-carriage-returns line)))))))
      (when (> (len self.hosts) 1)
        (import rich.table [Table]
                rich.text [Text])  ; lazy: the controller's
        (setv table (Table :title "Recap" :title-justify "left"))
        ;; Hostnames and statuses whole, on a narrow console too: the
        ;; count columns give way first.
        (.add-column table "host" :no-wrap True
                     :min-width (max (gfor h self.hosts (len h)) :default 4))
        (.add-column table "status" :no-wrap True :min-width 11)
        ;; What only a check counts is left out of a run that changes.
        (setv columns (if self.check
                          COUNTED
                          (lfor c COUNTED :if (not-in c #("would-change" "cannot-check")) c)))
        (for [column columns]
          (.add-column table column :justify "right" :no-wrap True :min-width (len column)))
        (for [[host record] (.items self.hosts)]
          (.add-row table (Text host) (or (get record "status") "not finished")
                    #* (gfor s columns (str (get (get record "counts") s)))))
        (.print (self._rich-console) table))))

  (defn _rich-console [self]
    ;; The recap is a rich table, whatever the console: where there is no
    ;; terminal, rich writes it without colour on the same stream.
    (if (isinstance self.console PlainConsole)
        ;; No terminal, so no width to fit: wide enough for every header.
        (do (import rich.console [Console])  ; lazy: the controller's
            (Console :file self.console.file :highlight False :soft-wrap True :width 160))
        self.console))

  (defn _spin [self]
    (when (and self.live? (not self.status))
      (import rich.live [Live])  ; lazy: the controller's
      (setv self.status (if self.grouped
                            (Live (_FleetTable self) :console self.console
                                  :refresh-per-second 4 :transient True)
                            (.status self.console (_Progress self))))
      (.start self.status)))

  (defn _stop-spinner [self]
    (when self.status
      (.stop self.status)
      (setv self.status None)))

  (defn close [self]
    "Stop the live display, and print what was kept of hosts that never
ended (the deployment was interrupted)."
    (with [self.lock]
      (self._stop-spinner)
      (for [host (list self.hosts)]
        (self._flush host)))))

(defclass JsonSink []
  "A sink that writes each event as one line of JSON to STREAM, stamped with
the time (seconds since the epoch) as \"time\".  Events from several threads
are written one whole line at a time."
  (defn __init__ [self [stream None]]
    (setv self.stream (or stream sys.stdout)
          self.lock (threading.Lock)))
  (defn __call__ [self event]
    (setv line (+ (json.dumps {#** event "time" (round (time.time) 3)}
                              :ensure-ascii False :default str)
                  "\n"))
    (with [self.lock]
      (.write self.stream line)
      (.flush self.stream)))
  (defn finish [self] None)
  (defn close [self] None))

(defn error [message [console None]]
  "Print a user-facing error MESSAGE."
  (setv console (or console (default-console :stderr True)))
  (.print console (.assemble (_text-class console)
                             #("consfig: error: " "bold red") (printable (str message)))))

(defn json-error [message [stream None]]
  "Write a user-facing error MESSAGE as one JSON line, an `error` event, to
STREAM (stdout): what a `--json` run prints in place of `error`, so that
everything it prints is JSON."
  ((JsonSink stream) {"event" "error" "message" (str message)}))

(export :objects [Reporter JsonSink error json-error collapse-carriage-returns PlainConsole PlainText
                  default-console])
