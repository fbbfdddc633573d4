;; How data travels over a :python hop (consfig.data.transit): the
;; controller's manifest and data frame, the target's receiving into a real
;; cache directory.

(import json
        os
        time
        pytest
        consfig.boot [data-entry data-inventory]
        consfig.data.items [DataItem Secret]
        consfig.data.store [DataCache UNUSED-DAYS]
        consfig.data.transit [data-manifest kept? data-frame sent-events withheld-message
                              ReceivedData receive-data received-items]
        consfig.errors [FailedChange]
        consfig.util [sha256-hex])

(defn item [iden1 iden2 version content * [secret False]]
  (DataItem iden1 iden2 version :secret secret :content content))

(setv MOTD (item "web.test" "motd" "v1" b"hello\n")
      KEY (item "web.test" "key" "provided" b"s3cret-key" :secret True))

(defclass Controller []
  "The controller's end of the frames, answering as `consfig.python_hop`
does: the first data frame carries ITEMS; a need-data the items it names,
out of ALL (none when ALL is not given)."
  (defn __init__ [self items [all None]]
    (setv self.frames [(data-frame items)]
          self.all (or all [])
          self.asked []))
  (defn next-data [self]
    (setv #(msg payload) (.pop self.frames 0))
    {#** msg "_payload" payload})
  (defn ask [self msg]
    (.append self.asked msg)
    (setv wanted (sfor [a b] (get msg "items") #(a b)))
    (.append self.frames (data-frame (lfor i self.all :if (in #(i.iden1 i.iden2) wanted) i)))))

(defn apply-message [items]
  {"op" "apply" "data" (data-manifest items)})

(defn all-bytes-under [root]
  (setv out b"")
  (for [[d dirs names] (os.walk root) n names]
    (with [f (open (os.path.join d n) "rb")] (+= out (.read f))))
  out)

;; The controller's side

(defn test-the-manifest-says-what-each-item-is-without-content []
  (assert (= (data-manifest [MOTD])
             [{"iden1" "web.test" "iden2" "motd" "version" "v1" "secret" False
               "sha256" (sha256-hex b"hello\n")}])
          (data-manifest [MOTD])))

(defn test-the-manifest-gives-no-digest-of-a-secret []
  (setv m (get (data-manifest [KEY]) 0))
  (assert (is (get m "sha256") None) f"no digest to guess the secret from: {m}")
  (assert (not-in "s3cret" (json.dumps m)) "nor the secret"))

(defn test-a-version-listed-in-the-targets-inventory-is-kept [tmp-path]
  (.store (DataCache (str (/ tmp-path "data"))) "web.test" "motd" "v1" b"hello\n")
  (setv inventory (data-inventory (str tmp-path) (os.geteuid)))
  (assert (kept? MOTD inventory) f"kept: {inventory}")
  (assert (not (kept? (item "web.test" "motd" "v2" b"new") inventory)) "another version is not")
  (assert (not (kept? (item "web.test" "other" "v1" b"hello\n") inventory)) "another item is not"))

(defn test-a-secret-is-never-taken-as-kept []
  (setv #(entry name) (data-entry "web.test" "key" "provided"))
  (assert (not (kept? KEY {entry [name]})) "a secret is sent every time"))

(defn test-nothing-is-kept-by-a-target-without-an-inventory []
  (assert (not (kept? MOTD None)) "no safe cache there: None")
  (assert (not (kept? MOTD ["not" "a" "dict"])) "nor a malformed hello"))

(defn test-the-data-frame-carries-the-contents-end-to-end-with-their-sizes []
  (setv #(msg payload) (data-frame [MOTD (item "a" "b" "v" b"")  KEY]))
  (assert (= (get msg "op") "data") msg)
  (assert (= (lfor i (get msg "items") (get i "size")) [6 0 10]) (get msg "items"))
  (assert (= payload b"hello\ns3cret-key") "each content, a secret's revealed, in order"))

(defn test-the-data-frame-message-holds-no-content []
  (setv #(msg payload) (data-frame [KEY]))
  (assert (not-in "s3cret" (json.dumps msg)) f"the secret is in the payload only: {msg}"))

(defn test-sent-events-name-host-and-item-never-content []
  (setv events (sent-events [MOTD KEY] "web.test"))
  (assert (= (lfor e events (get e "host")) ["web.test" "web.test"]) "the host")
  (assert (all (gfor e events (= (get e "depth") 0))) "at depth 0")
  (assert (in "sent secret (web.test key)" (get events 1 "text")) (get events 1 "text"))
  (assert (not-in "s3cret" (json.dumps events)) "no content in an event"))

(defn test-the-withheld-message-names-the-secret-and-what-to-do []
  (setv text (withheld-message "web.test" "key"))
  (assert (in "(web.test key)" text) text)
  (assert (in "--no-secrets" text) text)
  (assert (in "consfig deploy" text) text))

;; The target's side: ReceivedData

(defn received [#* items]
  ;; ReceivedData holding ITEMS as receive-data gives them.
  (ReceivedData (dfor i items
                      #(i.iden1 i.iden2) {#** (get (data-manifest [i]) 0)
                                          "content" (let [c (.content i)]
                                                      (if i.secret (.reveal c) c))})))

(defn test-received-data-gives-versions-and-contents []
  (setv source (received MOTD KEY))
  (assert (= (.version source "web.test" "motd") "v1") "a version")
  (assert (= (.fetch source "web.test" "motd") b"hello\n") "a content")
  (assert (is (.version source "web.test" "absent") None) "no version of an item not sent"))

(defn test-received-data-gives-a-secret-as-a-secret []
  (setv source (received KEY))
  (assert (.secret? source "web.test" "key") "said to be secret")
  (assert (= (.fetch source "web.test" "key") (Secret b"s3cret-key")) "wrapped")
  (assert (not (.secret? (received MOTD) "web.test" "motd")) "a non-secret is not"))

(defn test-received-data-is-not-prefetched []
  (assert (is ReceivedData.prefetch False) "a withheld item fails its property, not the host"))

(defn test-a-withheld-item-fails-when-read-saying-why []
  (setv source (ReceivedData {#("web.test" "key") {"iden1" "web.test" "iden2" "key"
                                                   "version" "withheld" "withheld" True
                                                   "secret" True "content" None}}))
  (assert (= (.version source "web.test" "key") "withheld") "it has a version")
  (with [e (pytest.raises FailedChange)]
    (.fetch source "web.test" "key"))
  (assert (= (str e.value) (withheld-message "web.test" "key")) (str e.value)))

(defn test-received-items-become-data-items []
  (setv items (received-items {#("web.test" "motd") {#** (get (data-manifest [MOTD]) 0) "content" b"hello\n"}
                               #("web.test" "key") {#** (get (data-manifest [KEY]) 0) "content" b"s3cret-key"}}))
  (assert (= (.content (get items #("web.test" "motd"))) b"hello\n") "a content")
  (assert (= (. (get items #("web.test" "motd")) version) "v1") "a version")
  (assert (= (.content (get items #("web.test" "key"))) (Secret b"s3cret-key")) "a secret stays one"))

(defn test-each-withheld-item-names-itself-when-read []
  (setv items (received-items (dfor k [#("a" "one") #("b" "two")]
                                    k {"iden1" (get k 0) "iden2" (get k 1) "version" "withheld"
                                       "withheld" True "secret" True "content" None})))
  (for [k [#("a" "one") #("b" "two")]]
    (with [e (pytest.raises FailedChange)]
      (.content (get items k)))
    (assert (in f"({(get k 0)} {(get k 1)})" (str e.value)) f"{k}: {e.value}")))

;; The target's side: receive-data

(defn test-receiving-takes-the-items-from-the-data-frame []
  (setv c (Controller [MOTD KEY])
        entries (receive-data (apply-message [MOTD KEY]) c.next-data c.ask None))
  (assert (= (get entries #("web.test" "motd") "content") b"hello\n") "the content")
  (assert (= (get entries #("web.test" "key") "content") b"s3cret-key") "the secret's")
  (assert (= (get entries #("web.test" "motd") "version") "v1") "with its manifest")
  (assert (= c.asked []) "nothing more asked for"))

(defn test-nothing-is-read-when-the-manifest-is-empty []
  (setv c (Controller []))
  (assert (= (receive-data {"op" "apply"} c.next-data c.ask None) {}) "no entries")
  (assert (= (len c.frames) 1) "no data frame is read"))

(defn test-received-non-secrets-are-kept-in-the-cache [tmp-path]
  (setv root (str (/ tmp-path "data"))
        c (Controller [MOTD]))
  (receive-data (apply-message [MOTD]) c.next-data c.ask root)
  (assert (= (.load (DataCache root) "web.test" "motd" "v1") b"hello\n") "kept for next time"))

(defn test-a-secret-is-never-stored-in-the-cache [tmp-path]
  (setv root (str (/ tmp-path "data"))
        c (Controller [MOTD KEY]))
  (receive-data (apply-message [MOTD KEY]) c.next-data c.ask root)
  (assert (not-in b"s3cret" (all-bytes-under tmp-path)) "no file holds the secret")
  (assert (is (.load (DataCache root) "web.test" "key" "provided") None) "nor is it kept"))

(defn test-a-kept-version-is-taken-from-the-cache-not-sent-again [tmp-path]
  (setv root (str (/ tmp-path "data")))
  (.store (DataCache root) "web.test" "motd" "v1" b"hello\n")
  (setv c (Controller [KEY])
        entries (receive-data (apply-message [MOTD KEY]) c.next-data c.ask root))
  (assert (= (get entries #("web.test" "motd") "content") b"hello\n") "from the cache")
  (assert (= c.asked []) "not asked for"))

(defn test-a-damaged-kept-version-is-asked-for-again-and-replaced [tmp-path]
  (setv root (str (/ tmp-path "data"))
        cache (DataCache root))
  (.store cache "web.test" "motd" "v1" b"hello\n")
  (with [f (open (.path cache "web.test" "motd" "v1") "wb")] (.write f b"HELLO\n"))
  (setv c (Controller [] [MOTD])
        entries (receive-data (apply-message [MOTD]) c.next-data c.ask root))
  (assert (= c.asked [{"op" "need-data" "items" [["web.test" "motd"]]}]) c.asked)
  (assert (= (get entries #("web.test" "motd") "content") b"hello\n") "the good content")
  (assert (= (.load cache "web.test" "motd" "v1") b"hello\n") "which is kept instead"))

(defn test-a-version-that-arrives-damaged-is-refused-and-not-kept [tmp-path]
  (setv root (str (/ tmp-path "data"))
        forged (item "web.test" "motd" "v1" b"tampered\n")
        c (Controller [forged]))
  (with [e (pytest.raises OSError)]
    (receive-data (apply-message [MOTD]) c.next-data c.ask root))
  (assert (in "(web.test motd) version v1 arrived damaged" (str e.value)) (str e.value))
  (assert (is (.load (DataCache root) "web.test" "motd" "v1") None) "nothing kept"))

(defn test-an-item-the-controller-never-sends-is-an-error-naming-it []
  (setv c (Controller []))
  (with [e (pytest.raises OSError)]
    (receive-data (apply-message [MOTD]) c.next-data c.ask None))
  (assert (in "did not send data (web.test motd) version v1" (str e.value)) (str e.value)))

(defn test-without-a-safe-cache-data-is-received-and-nothing-written [tmp-path]
  (setv root (/ tmp-path "data"))
  (.mkdir root)
  (os.chmod root 0o777)
  (setv c (Controller [MOTD])
        entries (receive-data (apply-message [MOTD]) c.next-data c.ask (str root)))
  (assert (= (get entries #("web.test" "motd") "content") b"hello\n") "received all the same")
  (assert (= (os.listdir root) []) "nothing written in a directory others can write"))

(defn test-receiving-prunes-the-cache-but-keeps-what-was-used [tmp-path]
  (setv root (str (/ tmp-path "data"))
        cache (DataCache root)
        long-ago (- (time.time) (* (+ UNUSED-DAYS 1) 86400)))
  (.store cache "old.test" "gone" "v1" b"old")
  (.store cache "web.test" "motd" "v1" b"hello\n")
  (for [p [(.path cache "old.test" "gone" "v1") (.path cache "web.test" "motd" "v1")]]
    (os.utime (os.path.dirname p) #(long-ago long-ago)))
  (setv c (Controller []))
  (receive-data (apply-message [MOTD]) c.next-data c.ask root)
  (assert (is (.load cache "old.test" "gone" "v1") None) "an item no deployment used is pruned")
  (assert (= (.load cache "web.test" "motd" "v1") b"hello\n") "the one used now is kept"))

(defn test-hostile-identifiers-travel-and-are-kept-under-the-cache [tmp-path]
  (setv root (str (/ tmp-path "data"))
        odd (item "a\nb\x00c" "../../etc/passwd" "v\n1" (bytes [0 255 10 13]))
        c (Controller [odd])
        entries (receive-data (apply-message [odd]) c.next-data c.ask root))
  (assert (= (get entries #("a\nb\x00c" "../../etc/passwd") "content") (bytes [0 255 10 13]))
          "the bytes as sent")
  (assert (= (sorted (os.listdir tmp-path)) ["data"]) "nothing written outside the cache")
  (assert (= (.load (DataCache root) "a\nb\x00c" "../../etc/passwd" "v\n1") (bytes [0 255 10 13]))
          "kept under its digests"))
