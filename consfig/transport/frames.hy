"The frame format of the `:python` hop's wire protocol.

A frame is two big-endian 32-bit lengths, a JSON message of the first length
and a binary payload of the second (usually empty; the bundle travels as one
raw payload, not as base64).  Both the controller and the target use this
module; the bootstrap (`consfig/boot.py`) reads and writes the same frames
with the standard library alone, before this module is on the target."

(import collections
        itertools
        json
        struct
        consfig.util [bounded left-out-note])

(setv _HEADER (struct.Struct ">II"))

;; A target's Python that has nothing to send says so every HEARTBEAT
;; seconds (`consfig.python_hop.target`), so that the controller can tell a quiet
;; target from a dead one (`consfig.python_hop.controller`, `consfig.python_hop.keep`).
(setv HEARTBEAT 5)

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

;; How much of a command's output the controller keeps whole: enough for any
;; file `cat` reads for a property or any package list; past it, the head
;; and the tail.
(setv OUTPUT-LIMIT (* 16 1024 1024))

(defclass OutputBuffer []
  "A command's output (bytes) collected as it arrives, in bounded memory:
kept whole up to LIMIT bytes (None: no limit); past that, its first and last
LIMIT/2 bytes, with a line between them saying how many were left out, as
`consfig.util.bounded` does for text."
  (defn __init__ [self [limit OUTPUT-LIMIT]]
    (setv self.limit limit
          self.head (bytearray)
          self.tail (collections.deque)
          self.tail-size 0
          self.total 0))

  (defn add [self data]
    "Take DATA, the next bytes of the output."
    (+= self.total (len data))
    (cond
      (is self.limit None) (.append self.tail data)
      (< (len self.head) (// self.limit 2))
      (do (setv room (- (// self.limit 2) (len self.head)))
          (.extend self.head (cut data 0 room))
          (when (> (len data) room) (self._add-tail (cut data room None))))
      True (self._add-tail data)))

  (defn _add-tail [self data]
    ;; Whole chunks are dropped from the front once what remains without
    ;; them is still the tail to keep: no copying of the tail on every add.
    (.append self.tail data)
    (+= self.tail-size (len data))
    (setv keep (- self.limit (// self.limit 2)))
    (while (>= (- self.tail-size (len (get self.tail 0))) keep)
      (-= self.tail-size (len (.popleft self.tail)))))

  (defn getvalue [self]
    "The output: whole, or its head and tail with the count left out."
    ;; One join, so that the output is copied once, not once per piece.
    (if (or (is self.limit None) (<= self.total self.limit))
        (.join b"" [self.head #* self.tail])
        (do (setv keep (- self.limit (// self.limit 2))
                  extra (- self.tail-size keep))
            (.join b"" [self.head
                        (.encode (left-out-note (- self.total (len self.head) keep)))
                        (cut (memoryview (get self.tail 0)) extra None)
                        #* (itertools.islice self.tail 1 None)])))))

(export :objects [frame read-frame bounded OutputBuffer OUTPUT-LIMIT HEARTBEAT])
