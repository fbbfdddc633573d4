;; consfig.transport.frames: the wire format of the :python hop, over real pipes, and
;; the bounded keeping of output.

(import os
        threading
        pytest
        consfig.boot :as boot
        consfig.transport.frames [frame read-frame bounded OutputBuffer])

(defn pipe []
  (setv #(r w) (os.pipe))
  #((os.fdopen r "rb" :buffering 0) (os.fdopen w "wb" :buffering 0)))

(defn test-a-frame-read-from-a-pipe-is-the-message-and-payload-written []
  (setv #(r w) (pipe))
  (.write w (frame {"op" "hello" "n" [1 2]} b"\x00\xffraw"))
  (.close w)
  (setv m (read-frame r))
  (assert (= (.pop m "_payload") b"\x00\xffraw") "the payload, bytes as sent")
  (assert (= m {"op" "hello" "n" [1 2]}) f"the message: {m}")
  (assert (is (read-frame r) None) "end of the stream is None"))

(defn test-a-frame-that-arrives-a-byte-at-a-time-is-read-whole []
  (setv #(r w) (pipe)
        data (frame {"op" "x"} (* b"p" 70000))
        calls [])
  (defn writer []
    (for [i (range 0 (len data) 4096)]
      (.write w (cut data i (+ i 4096))))
    (.close w))
  (setv t (threading.Thread :target writer))
  (.start t)
  (setv m (read-frame r :progress (fn [] (.append calls 1))))
  (.join t 10)
  (assert (= (len (get m "_payload")) 70000) "the whole payload")
  (assert (>= (len calls) 3) "PROGRESS heard of each part"))

(defn test-a-frame-cut-off-in-the-middle-is-the-end-of-the-stream []
  (setv #(r w) (pipe))
  (.write w (cut (frame {"op" "x"} b"payload") 0 -3))
  (.close w)
  (assert (is (read-frame r) None) "a partial frame is no frame"))

(defn test-a-frame-over-the-limit-is-refused-before-its-body-is-read []
  (setv #(r w) (pipe))
  (.write w (frame {"op" "x"} (* b"p" 1000)))
  (.close w)
  (with [e (pytest.raises ValueError)]
    (read-frame r :limit 100))
  (assert (in "more than the 100 allowed" (str e.value)) (str e.value)))

(defn test-the-bootstrap-reads-and-writes-the-same-frames []
  ;; boot.py speaks the format with the standard library alone.
  (setv #(r w) (pipe))
  (boot.write-frame w {"op" "hello" "protocol" boot.PROTOCOL})
  (.write w (frame {"op" "layers"} b"tar"))
  (.close w)
  (setv first (read-frame r)
        second (boot.read-frame r))
  (assert (= (get first "op") "hello") f"the bootstrap's frame read here: {first}")
  (assert (= (get second "_payload") b"tar") "this module's frame read by the bootstrap"))

(defn test-bounded-keeps-short-text-and-the-head-and-tail-of-long []
  (assert (= (bounded "short" 10) "short") "short text whole")
  (setv out (bounded (+ (* "a" 50) (* "b" 50)) 20))
  (assert (.startswith out (* "a" 10)) out)
  (assert (.endswith out (* "b" 10)) out)
  (assert (in "[… 80 bytes left out …]" out) out))

(defn test-an-output-buffer-under-its-limit-keeps-everything []
  (setv b (OutputBuffer 100))
  (for [chunk [b"one " b"two " b"three"]] (.add b chunk))
  (assert (= (.getvalue b) b"one two three") (.getvalue b)))

(defn test-an-output-buffer-over-its-limit-keeps-head-tail-and-the-count []
  (setv b (OutputBuffer 10))
  (for [i (range 100)] (.add b (.encode (str (% i 10)))))
  (setv v (.getvalue b))
  (assert (.startswith v b"01234") v)
  (assert (.endswith v b"56789") v)
  (assert (in b"[\xe2\x80\xa6 90 bytes left out \xe2\x80\xa6]" v) v))

(defn test-an-output-buffer-without-a-limit-keeps-everything []
  (setv b (OutputBuffer None))
  (.add b (* b"x" 100000))
  (assert (= (len (.getvalue b)) 100000) "all of it"))
