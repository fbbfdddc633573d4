"The frame format of the `:python` hop's wire protocol.

A frame is two big-endian 32-bit lengths, a JSON message of the first length
and a binary payload of the second (usually empty; the bundle travels as one
raw payload, not as base64).  Both the controller and the target use this
module; the bootstrap (`consfig/boot.py`) reads and writes the same frames
with the standard library alone, before this module is on the target."

(import json
        struct)

(setv _HEADER (struct.Struct ">II"))

(defn frame [msg [payload b""]]
  "The bytes of one frame: MSG (JSON data) and a binary PAYLOAD."
  (setv j (.encode (json.dumps msg :default str :separators #("," ":"))))
  (+ (.pack _HEADER (len j) (len payload)) j payload))

(setv _CHUNK 65536)

(defn _read-exactly [stream n progress]
  ;; A raw stream (a socket, a channel) may return less than asked; a large
  ;; frame is read a chunk at a time, saying so to PROGRESS after each.
  (setv parts [] got 0)
  (while (< got n)
    (setv more (.read stream (min _CHUNK (- n got))))
    (when (not more) (return None))
    (.append parts more)
    (+= got (len more))
    (progress))
  (.join b"" parts))

(defn read-frame [stream * [progress (fn [] None)] [limit None]]
  "The next frame's message, with its payload as `_payload`; None at the end
of the stream (or in the middle of a frame).  PROGRESS is called as each
part of it arrives.  A frame larger than LIMIT bytes is a `ValueError`."
  (setv header (_read-exactly stream _HEADER.size progress))
  (when (is header None) (return None))
  (setv #(a b) (.unpack _HEADER header))
  (when (and limit (> (+ a b) limit))
    (raise (ValueError f"a frame of {(+ a b)} bytes, more than the {limit} allowed")))
  (setv body (_read-exactly stream a progress))
  (when (is body None) (return None))
  (setv msg (json.loads body)
        payload (_read-exactly stream b progress))
  (when (is payload None) (return None))
  (setv (get msg "_payload") payload)
  msg)

(defn bounded [text [limit 65536]]
  "TEXT, or when it is longer than LIMIT characters its head and tail with
a line in between saying how many bytes were left out."
  (if (<= (len text) limit)
      text
      (do (setv half (// limit 2)
                left-out (len (.encode (cut text half (- half)) "utf-8" "replace")))
          (+ (cut text 0 half) f"\n[… {left-out} bytes left out …]\n" (cut text (- half) None)))))

(export :objects [frame read-frame bounded])
