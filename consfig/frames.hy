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

(defn _read-exactly [stream n]
  ;; A raw stream (a socket, a channel) may return less than asked.
  (setv parts [] got 0)
  (while (< got n)
    (setv more (.read stream (- n got)))
    (when (not more) (return None))
    (.append parts more)
    (+= got (len more)))
  (.join b"" parts))

(defn read-frame [stream]
  "The next frame's message, with its payload as `_payload`; None at the end
of the stream (or in the middle of a frame)."
  (setv header (_read-exactly stream _HEADER.size))
  (when (is header None) (return None))
  (setv #(a b) (.unpack _HEADER header)
        body (_read-exactly stream a))
  (when (is body None) (return None))
  (setv msg (json.loads body)
        payload (_read-exactly stream b))
  (when (is payload None) (return None))
  (setv (get msg "_payload") payload)
  msg)

(export :objects [frame read-frame])
