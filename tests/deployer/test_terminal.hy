;; What reaches the operator's terminal from a target: controls shown, never
;; obeyed; rich markup printed as it is.

(import io
        re
        rich.console [Console]
        consfig.deployer.report [Reporter]
        consfig.deployer.terminal [printable printable-event])

(defn test-printable-shows-escape-as-a-picture []
  (assert (= (printable "a\x1b[2Jb") "a␛[2Jb") (repr (printable "a\x1b[2Jb"))))

(defn test-printable-keeps-newlines-and-tabs []
  (assert (= (printable "a\tb\nc\n") "a\tb\nc\n") "newline and tab are layout, not controls"))

(defn test-printable-shows-every-other-c0-control-and-del []
  (for [c (+ (lfor i (range 32) :if (not-in (chr i) "\n\t") (chr i)) ["\x7f"])]
    (setv shown (printable c))
    (assert (!= shown c) f"{(repr c)} passed through")
    (assert (not (re.search r"[\x00-\x1f\x7f-\x9f]" shown)) (repr shown))))

(defn test-printable-shows-carriage-return []
  ;; A bare CR lets a line overwrite itself on screen: "ok" over "failed".
  (assert (= (printable "failed\rok  ") "failed␍ok  ") (repr (printable "failed\rok  "))))

(defn test-printable-spells-out-c1-controls []
  ;; \x9b is CSI on terminals that take 8-bit controls.
  (assert (= (printable "x\x9b2Jy\x85") "x\\x9b2Jy\\x85") (repr (printable "x\x9b2Jy\x85"))))

(defn test-printable-spells-out-bidi-overrides []
  (assert (= (printable "a\u202eb\u2066c") "a\\u202eb\\u2066c")
          (repr (printable "a\u202eb\u2066c"))))

(defn test-printable-shows-undecodable-bytes []
  ;; Text read with surrogateescape carries b"\xff" as "\udcff", which no
  ;; terminal encoding can print.
  (assert (= (printable "a\udcffb") "a\\xffb") (repr (printable "a\udcffb"))))

(defn test-printable-leaves-ordinary-unicode []
  (setv s "naïve — 日本語 ✓ [bold]x[/bold]")
  (assert (= (printable s) s) "nothing to neutralise"))

(defn test-printable-event-neutralises-every-string []
  (setv e (printable-event {"event" "output" "host" "h\x1b" "depth" 1 "text" "\x1b]52;c;eA==\x07"}))
  (assert (= e {"event" "output" "host" "h␛" "depth" 1 "text" "␛]52;c;eA==␇"}) (repr e)))

(defn test-printable-event-collapses-redrawn-output-lines-only []
  (setv out (printable-event {"event" "output" "text" "5%\r100%\nnext\r\n"})
        end (printable-event {"event" "end" "desc" "a\rb" "message" "x\ry"})
        diff (printable-event {"event" "diff" "text" "+crlf\r\n"}))
  (assert (= (get out "text") "100%\nnext\n") (repr out))
  (assert (= (get end "message") "y") (repr end))
  (assert (= (get end "desc") "a␍b") "a description's CR is shown")
  (assert (= (get diff "text") "+crlf␍\n") "a diff shows a CRLF line ending"))

(setv HOSTILE "\x1b]52;c;cm0gLXJmIC8K\x07\x1b[2J\x1b]0;pwned\x07\x9b31m [bold]loud[/bold]\rover")

(defn _render [events [verbosity 1]]
  (setv buf (io.StringIO)
        r (Reporter (Console :file buf :force-terminal True :width 200 :highlight False)
                    :verbosity verbosity))
  (try
    (for [e events] (r e))
    (finally (.close r)))
  (.getvalue buf))

(defn test-reporter-neutralises-target-text []
  (setv out (_render
              [{"event" "start" "host" "h" "depth" 0 "desc" f"desc {HOSTILE}"}
               {"event" "output" "host" "h" "depth" 0 "text" f"out {HOSTILE}\nline two"}
               {"event" "diff" "host" "h" "depth" 0 "path" "/f" "text" f"+{HOSTILE}\n-old\n"}
               {"event" "end" "host" "h" "depth" 0 "desc" f"desc {HOSTILE}" "status" "failed"
                "message" f"msg {HOSTILE}"}
               {"event" "summary" "host" "h" "depth" 0 "status" "failed" "changes" 0
                "failures" 1}]))
  (for [bad ["\x1b]52" "\x1b]0;" "\x1b[2J" "\x07" "\x9b" "\rover"]]
    (assert (not-in bad out) f"{(repr bad)} reached the terminal: {(repr out)}"))
  ;; What is left of ESC is rich's own: SGR styling, and the spinner's
  ;; cursor and line controls.
  (setv rest (re.sub r"\x1b\[[0-9;?]*[mlhAKG]" "" out))
  (assert (not-in "\x1b" rest) (repr rest))
  (assert (in "␛]52;c;cm0gLXJmIC8K␇" out) "the sequence is shown, visibly")
  (assert (in "[bold]loud[/bold]" out) "markup in target text is printed literally"))

(defn test-reporter-spinner-prints-markup-literally []
  (setv out (_render [{"event" "start" "host" "h" "depth" 0 "desc" "[blink]x[/blink] \x1b[2J"}]))
  (assert (not-in "\x1b[2J" out) (repr out))
  (assert (not-in "\x1b[5m" out) "no blink from markup in a description"))
