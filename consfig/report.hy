"Rendering the engine's events with rich.

One line per announced property, `host :: description ... status`, children
indented under a heading for their parent, failure messages under the failed
line, a spinner naming the property being applied when the output is a
terminal, and a closing summary."

(import rich.console [Console]
        rich.text [Text])

(setv STATUS-WORDS {"ok" #("ok" "green")
                    "changed" #("done" "bold yellow")
                    "failed" #("failed" "bold red")
                    "skipped" #("skipped" "dim")})

(setv SUMMARIES {"no-change" #("No changes were made." "green")
                 "changed" #("Changes were made." "bold yellow")
                 "failed" #("There were failures." "bold red")})

(defclass Reporter []
  "A sink for engine events that prints them as they come."

  (defn __init__ [self [console None] [verbosity 0]]
    (setv self.console (or console (Console :highlight False :soft-wrap True))
          self.verbosity verbosity
          ;; Announced properties started but not ended: [depth desc shown?]
          self.open []
          self.status None))

  (defn __call__ [self event]
    (setv kind (get event "event"))
    (cond (= kind "start") (self._start event)
          (= kind "end") (self._end event)
          (= kind "output") (self._output event)
          (= kind "diff") (self._diff event)
          (= kind "summary") (self._summary event)))

  (defn _prefix [self event [depth None]]
    (Text.assemble #((str (.get event "host" "")) "bold")
                   " :: "
                   (* "  " (if (is depth None) (get event "depth") depth))))

  (defn _show-open [self event]
    ;; A property's heading is printed once something happens inside it.
    (for [entry self.open]
      (when (not (get entry 2))
        (.print self.console (+ (self._prefix event (get entry 0)) (Text (get entry 1))))
        (setv (get entry 2) True))))

  (defn _start [self event]
    (self._show-open event)
    (.append self.open [(get event "depth") (get event "desc") False])
    (self._spin (get event "desc")))

  (defn _end [self event]
    (if (and self.open (!= (get event "status") "skipped")
             (= (get (get self.open -1) 0) (get event "depth")))
        (.pop self.open)
        ;; The end of a property inside open ones (a failure, a skip, an
        ;; unannounced property): their headings first.
        (self._show-open event))
    (setv #(word style) (get STATUS-WORDS (get event "status")))
    (.print self.console (+ (self._prefix event) (Text (get event "desc")) " ... "
                            (Text word :style style)))
    (when (.get event "message")
      (self._indented event (+ (get event "message")
                               (if (.get event "where") f"\n(at {(get event "where")})" ""))
                      "red"))
    (when (and (.get event "traceback") (>= self.verbosity 1))
      (self._indented event (get event "traceback") "dim")))

  (defn _indented [self event text style]
    (for [line (.splitlines text)]
      (.print self.console (+ (self._prefix event (+ (get event "depth") 2))
                              (Text line :style style)))))

  (defn _output [self event]
    (self._show-open event)
    (self._indented event (get event "text") "dim"))

  (defn _diff [self event]
    (when (>= self.verbosity 1)
      (self._show-open event)
      (for [line (.splitlines (get event "text"))]
        (.print self.console
                (+ (self._prefix event (+ (get event "depth") 1))
                   (Text line :style (cond (.startswith line "+") "green"
                                           (.startswith line "-") "red"
                                           True "dim")))))))

  (defn _summary [self event]
    (self._stop-spinner)
    (setv #(text style) (get SUMMARIES (get event "status")))
    (.print self.console (+ (self._prefix event 0) (Text text :style style))))

  (defn _spin [self desc]
    (when self.console.is-terminal
      (if self.status
          (.update self.status f"applying: {desc}")
          (do (setv self.status (.status self.console f"applying: {desc}"))
              (.start self.status)))))

  (defn _stop-spinner [self]
    (when self.status
      (.stop self.status)
      (setv self.status None)))

  (defn close [self]
    (self._stop-spinner)))

(defn error [message [console None]]
  "Print a user-facing error MESSAGE."
  (.print (or console (Console :stderr True :highlight False :soft-wrap True))
          (Text.assemble #("consfig: error: " "bold red") (str message))))

(export :objects [Reporter error])
