"Signing images, and publishing them where hosts pull them from.

`consfig keygen -o KEYFILE` makes an Ed25519 key pair: KEYFILE, the private
key (PKCS#8 PEM, mode 0600), and KEYFILE.pub, one line `consfig-ed25519
BASE64 COMMENT` that hosts are given to trust.  `consfig publish HOST… --to
DIR --signing-key KEYFILE` writes, for each host, DIR/HOST (its image) and
DIR/HOST.sig (a signed statement naming the host, the image's SHA-256 and
size, and when it was published: see `consfig.puller`), and DIR/index.json.

Every file is written to a temporary name in DIR and renamed into place, so
that a server never serves half of one.  An image whose bytes did not
change keeps its file and its signature untouched: the hosts' conditional
GETs then download nothing."

(import datetime
        hashlib
        json
        os
        re
        cryptography.exceptions [UnsupportedAlgorithm]
        cryptography.hazmat.primitives [serialization]
        cryptography.hazmat.primitives.asymmetric.ed25519 [Ed25519PrivateKey]
        consfig.errors [ConsfigError]
        consfig.util [write-atomically]
        consfig.puller [KEY-PREFIX Refused check-statement key-id public-key-bytes
                        public-key-text signature-file statement-bytes])

(setv INDEX "index.json"
      INDEX-FORMAT "consfig-publish 1")

;; A hostname is used as a file name in DIR and in the URL hosts fetch.
(setv _HOSTNAME (re.compile r"[A-Za-z0-9][A-Za-z0-9_.-]*"))

(defn keygen [path [comment None]]
  "Make an Ed25519 key pair: the private key at PATH (mode 0600), the public
key at PATH.pub.  Return the public key's line.  An existing PATH is never
overwritten: losing a signing key means re-keying every host."
  (setv pub-path (+ path ".pub"))
  (for [p [path pub-path]]
    (when (os.path.lexists p)
      (raise (ConsfigError f"{p} exists: not overwriting a key (remove it first, or choose another -o)"))))
  (setv key (Ed25519PrivateKey.generate)
        raw (.public-bytes (.public-key key) serialization.Encoding.Raw
                           serialization.PublicFormat.Raw)
        line (public-key-text raw (or comment (os.path.basename path))))
  (write-atomically path (.private-bytes key serialization.Encoding.PEM
                                         serialization.PrivateFormat.PKCS8
                                         (serialization.NoEncryption))
                    :mode 0o600)
  (write-atomically pub-path (.encode line) :mode 0o644)
  line)

(defn load-signing-key [path]
  "The Ed25519 private key in the file PATH (as `keygen` writes it)."
  (try
    (with [f (open path "rb")]
      (setv key (serialization.load-pem-private-key (.read f) :password None)))
    (except [e OSError]
      (raise (ConsfigError f"cannot read the signing key {path}: {e.strerror}")))
    (except [e #(ValueError TypeError UnsupportedAlgorithm)]
      (raise (ConsfigError f"{path} is not an unencrypted PEM private key ({e}); make one with consfig keygen"))))
  (when (not (isinstance key Ed25519PrivateKey))
    (raise (ConsfigError f"{path} is not an Ed25519 key; make one with consfig keygen")))
  key)

(defn public-key-of [key]
  "The raw 32 bytes of the public half of KEY."
  (.public-bytes (.public-key key) serialization.Encoding.Raw serialization.PublicFormat.Raw))

(defn read-public-key [text-or-path]
  "The raw 32 bytes of a public key given as its line (`consfig-ed25519
BASE64 …`) or as the path of a KEYFILE.pub."
  (if (and (not (.startswith (.lstrip text-or-path) KEY-PREFIX))
           (os.path.isfile text-or-path))
      (with [f (open text-or-path)] (public-key-bytes (.read f)))
      (public-key-bytes text-or-path)))

(defn _now []
  (.strftime (datetime.datetime.now datetime.timezone.utc) "%Y-%m-%dT%H:%M:%S.%fZ"))

(defn _after [published previous]
  ;; A publication time later than PREVIOUS even if the clock went back (or
  ;; two publications fall in one microsecond): hosts refuse to go back.
  (if (or (not previous) (> published previous))
      published
      (.strftime (+ (datetime.datetime.strptime previous "%Y-%m-%dT%H:%M:%S.%fZ")
                    (datetime.timedelta :microseconds 1))
                 "%Y-%m-%dT%H:%M:%S.%fZ")))

(setv VALID-FOR (* 7 86400))

(defn _plus [published seconds]
  (.strftime (+ (datetime.datetime.strptime published "%Y-%m-%dT%H:%M:%S.%fZ")
                (datetime.timedelta :seconds seconds))
             "%Y-%m-%dT%H:%M:%S.%fZ"))

(defn sign-image [key host image [published None] * [valid-for VALID-FOR]]
  "The signature file for IMAGE (bytes), HOST's image, signed with KEY,
valid for VALID-FOR seconds from its publication (hosts refuse it after)."
  (setv raw (public-key-of key)
        published (or published (_now))
        statement (statement-bytes host (.hexdigest (hashlib.sha256 image)) (len image)
                                   published (key-id raw) (_plus published valid-for)))
  (signature-file statement (.sign key statement)))

(defn _read [path]
  (try (with [f (open path "rb")] (.read f))
       (except [FileNotFoundError] None)))

(defn _current [directory host image raw valid-for]
  ;; The fields of HOST's published signature when it still vouches, with
  ;; this key, for exactly IMAGE; else None.
  (setv sig (_read (os.path.join directory (+ host ".sig"))))
  (when (and sig (= (_read (os.path.join directory host)) image))
    (try
      (setv fields (check-statement sig [raw] host))
      ;; Signed again, with a new expiry, once half its validity is gone
      ;; (or it has none): a site publishing as often as that never lets
      ;; its hosts' statements expire.
      (when (and (= (get fields "sha256") (.hexdigest (hashlib.sha256 image)))
                 (> (.get fields "expires" "") (_plus (_now) (// valid-for 2))))
        (return fields))
      (except [Refused]))))

(defn _previous-published [directory host]
  (setv sig (_read (os.path.join directory (+ host ".sig"))))
  (when sig
    (setv m (re.search rb"\npublished (\S+)\n" sig))
    (when m (.decode (.group m 1) "ascii" "replace"))))

(defn _index [directory]
  (setv data (_read (os.path.join directory INDEX)))
  (try
    (setv index (json.loads (or data "{}")))
    (except [ValueError]
      (raise (ConsfigError f"{(os.path.join directory INDEX)} is not JSON; remove it to start a new index"))))
  (if (= (.get index "format") INDEX-FORMAT) index {"format" INDEX-FORMAT "hosts" {}}))

(defn publish-images [images directory key * [private #()] [valid-for VALID-FOR]]
  "Publish IMAGES (a dict: hostname → the image's bytes) in DIRECTORY,
signed with KEY (an Ed25519 private key), each statement valid for
VALID-FOR seconds (a week); the images of the hosts in PRIVATE (which hold
secrets) mode 0600, the rest 0644.  Return a list of `[host sha256
changed?]`, one per host."
  (for [host images]
    (when (not (re.fullmatch _HOSTNAME host))
      (raise (ConsfigError f"{host !r} cannot be published: not a hostname usable as a file name"))))
  (os.makedirs directory :exist-ok True)
  (setv raw (public-key-of key)
        index (_index directory)
        results [])
  (for [[host image] (sorted (.items images))]
    (setv fields (_current directory host image raw valid-for)
          changed (is fields None))
    (when changed
      ;; The image before its signature: a host that fetches in between
      ;; sees a mismatch and tries again once, rather than an old image
      ;; under a new signature.
      (setv sig (sign-image key host image
                            (_after (_now) (_previous-published directory host))
                            :valid-for valid-for))
      (write-atomically (os.path.join directory host) image
                        :mode (if (in host private) 0o600 0o644))
      (write-atomically (os.path.join directory (+ host ".sig")) sig)
      (setv fields (check-statement sig [raw] host)))
    (setv (get index "hosts" host)
          (dfor k ["sha256" "size" "published" "key"] k (get fields k)))
    (.append results [host (get fields "sha256") changed]))
  (setv text (.encode (+ (json.dumps index :indent 1 :sort-keys True) "\n")))
  (when (!= text (_read (os.path.join directory INDEX)))
    (write-atomically (os.path.join directory INDEX) text))
  results)

(export :objects [keygen load-signing-key public-key-of read-public-key
                  sign-image publish-images])
