"Text from a target, made safe to put on the operator's terminal.

A command's output, a file's diff, an error message or a description may
carry whatever bytes the target chose: escape sequences that clear the
screen, retitle the window or write the clipboard (OSC 52), a carriage
return that lets `ok` overwrite `failed`, bidirectional overrides that
reorder what is read.  Before the reporter renders any of it, `printable`
shows each such character visibly instead of letting the terminal obey it."

(import re)

;; C0 controls but newline and tab, DEL, C1 controls, the bidirectional
;; marks, embeddings, overrides and isolates, and lone surrogates (what
;; surrogateescape makes of bytes that are not UTF-8).
(setv _UNSAFE (re.compile "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"))

(defn _shown [m]
  (setv c (.group m 0)
        n (ord c))
  (cond (< n 0x20) (chr (+ 0x2400 n))        ; ␛ for ESC, ␍ for CR, …
        (= n 0x7f) "\u2421"                  ; ␡
        (<= n 0xff) f"\\x{n :02x}"
        (<= 0xdc80 n 0xdcff) f"\\x{(- n 0xdc00) :02x}"
        True f"\\u{n :04x}"))

(defn printable [text]
  "TEXT with every character a terminal would act on, other than newline
and tab, shown instead: C0 controls as their Unicode pictures (`␛` for ESC,
`␍` for a carriage return), C1 controls as `\\x9b`, bidirectional overrides
as `\\u202e`, undecodable bytes carried as lone surrogates as `\\xff`.

    (printable \"\\x1b[2Jhi\\n\")  ; => \"␛[2Jhi\\n\""
  (.sub _UNSAFE _shown text))

(defn collapse-carriage-returns [line]
  "What a terminal would show of LINE: progress redrawn with carriage
returns (`50%\\r100%`) collapses to its final state."
  (setv parts (lfor p (.split (.rstrip line "\r") "\r") :if p p))
  (if parts (get parts -1) ""))

;; The fields that carry a command's output, where a carriage return is a
;; progress meter redrawing its line (apt, dpkg, wget): there the line shows
;; as the terminal would leave it.  Anywhere else a carriage return is shown.
(setv _REDRAWN {"output" #("text") "end" #("message")})

(defn _redrawn [text]
  (.join "\n" (map collapse-carriage-returns (.split text "\n"))))

(defn printable-event [event]
  "EVENT (a dict) with `printable` applied to each of its string values;
the lines of a command's output (an output event's \"text\", a failure's
\"message\") first collapsed as `collapse-carriage-returns` does."
  (setv redrawn (.get _REDRAWN (.get event "event") #()))
  (dfor [k v] (.items event)
        k (cond (not (isinstance v str)) v
                (in k redrawn) (printable (_redrawn v))
                True (printable v))))

(export :objects [printable printable-event collapse-carriage-returns])
