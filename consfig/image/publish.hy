"Signing images, and publishing them where hosts pull them from.

Images are signed with OpenSSH signatures, `ssh-keygen -Y sign -n
consfig-image`: with an SSH key the site's admins already have, one that
`consfig keygen -o KEYFILE` makes (an ordinary OpenSSH Ed25519 pair,
KEYFILE and KEYFILE.pub, made by ssh-keygen), or one held by ssh-agent
(given as its public key).  `consfig publish HOST… --to DIR --signing-key
KEYFILE` writes, for each host, DIR/HOST (its image) and DIR/HOST.sshsig (a
signed statement naming the host, the image's SHA-256 and size, when it was
published and until when it holds: see `consfig.image.puller`), and
DIR/index.json.

Until every host runs a puller that checks OpenSSH signatures,
`--legacy-key OLDKEY` (a key of consfig's old format, PKCS#8 PEM) also
writes DIR/HOST.sig, the same statement signed the old way, which those
pullers read; without it, a DIR/HOST.sig left there is removed.

Every file is written to a temporary name in DIR and renamed into place, so
that a server never serves half of one.  An image whose bytes did not
change keeps its file and its signature untouched: the hosts' conditional
GETs then download nothing."

(import base64
        datetime
        hashlib
        json
        os
        re
        subprocess
        tempfile
        unicodedata
        cryptography.exceptions [UnsupportedAlgorithm]
        cryptography.hazmat.primitives [serialization]
        cryptography.hazmat.primitives.asymmetric.ed25519 [Ed25519PrivateKey]
        consfig.errors [ConsfigError]
        consfig.util [write-atomically]
        consfig.image.puller [IDENTITY NAMESPACE SUFFIX LEGACY-KEY-PREFIX Refused allowed-signers
                              check-statement fingerprint public-key signature-file statement-bytes])

(setv INDEX "index.json"
      INDEX-FORMAT "consfig-publish 1"
      LEGACY-SUFFIX ".sig"
      LEGACY-FORMAT "consfig-signed-image 1"
      VALID-FOR (* 7 86400)
      ;; A person may have to type a passphrase, or touch a security key.
      SIGN-TIMEOUT 600)

;; A hostname is used as a file name in DIR and in the URL hosts fetch.
(setv _HOSTNAME (re.compile r"[A-Za-z0-9][A-Za-z0-9_.-]*"))

(defn _ssh-keygen [args what [timeout 60]]
  ;; The completed ssh-keygen ARGS, its output as text; a ConsfigError
  ;; saying WHAT failed, with ssh-keygen's own words, when it did.
  (try
    (setv r (subprocess.run ["ssh-keygen" #* args] :stdin subprocess.DEVNULL
                            :capture-output True :timeout timeout))
    (except [FileNotFoundError]
      (raise (ConsfigError "ssh-keygen is not installed here: install openssh-client (OpenSSH 8.2 or later)")))
    (except [subprocess.TimeoutExpired]
      (raise (ConsfigError f"{what}: ssh-keygen took more than {timeout} s"))))
  (when r.returncode
    ;; Its progress lines say nothing about why it failed.
    (setv said (lfor line (.splitlines (.decode r.stderr "utf-8" "replace"))
                     :if (and (.strip line) (not (re.match r"(Signing file|Write signature to) " line)))
                     (.strip line)))
    (raise (ConsfigError f"{what}: {(or (.join "; " said) f"ssh-keygen exited {r.returncode}")}")))
  r)

(defn _refuse-existing [#* paths]
  (for [p paths]
    (when (os.path.lexists p)
      (raise (ConsfigError f"{p} exists: not overwriting a key (remove it first, or choose another -o)")))))

(defn _comment [comment]
  (when (any (gfor c comment (in (unicodedata.category c) #("Cc" "Zl" "Zp"))))
    (raise (ConsfigError f"a key's comment is one line of printable text, not {comment !r}")))
  comment)

(defn keygen [path [comment None]]
  "Make an OpenSSH Ed25519 key pair with ssh-keygen: the private key at PATH
(mode 0600, no passphrase: add one with `ssh-keygen -p -f PATH`, or keep it
in ssh-agent), the public key at PATH.pub.  Return the public key's line.
An existing PATH is never overwritten: losing a signing key means re-keying
every host."
  (setv path (os.fspath path)
        comment (_comment (or comment (os.path.basename path))))
  (_refuse-existing path (+ path ".pub"))
  (_ssh-keygen ["-q" "-t" "ed25519" "-N" "" "-C" comment "-f" path] f"cannot make a key at {path}")
  (with [f (open (+ path ".pub"))] (.read f)))

(defn load-legacy-key [path]
  "The Ed25519 private key in the file PATH, as consfig's old `keygen` wrote
it (PKCS#8 PEM)."
  (try
    (with [f (open path "rb")]
      (setv key (serialization.load-pem-private-key (.read f) :password None)))
    (except [e OSError]
      (raise (ConsfigError f"cannot read the key {path}: {e.strerror}")))
    (except [e #(ValueError TypeError UnsupportedAlgorithm)]
      (raise (ConsfigError f"{path} is not a key of consfig's old format, an unencrypted PEM private key ({e})"))))
  (when (not (isinstance key Ed25519PrivateKey))
    (raise (ConsfigError f"{path} is not an Ed25519 key of consfig's old format")))
  key)

(defn keygen-from [old path [comment None]]
  "Write the key of consfig's old format in the file OLD as an OpenSSH key
pair: the same key, at PATH (0600) and PATH.pub, for ssh-keygen to sign
with.  Hosts that trust its old public line trust it as it is.  Return the
public key's line."
  (setv path (os.fspath path)
        key (load-legacy-key old)
        comment (_comment (or comment (os.path.basename path))))
  (_refuse-existing path (+ path ".pub"))
  (setv line (+ (.decode (.public-bytes (.public-key key) serialization.Encoding.OpenSSH
                                        serialization.PublicFormat.OpenSSH))
                (if comment f" {comment}" "") "\n"))
  (write-atomically path (.private-bytes key serialization.Encoding.PEM
                                         serialization.PrivateFormat.OpenSSH
                                         (serialization.NoEncryption))
                    :mode 0o600)
  (write-atomically (+ path ".pub") (.encode line) :mode 0o644)
  line)

(defclass Signer []
  "A key to sign with: `path`, what `ssh-keygen -Y sign -f` is given (a
private key, or a public key whose private half ssh-agent holds), `line`
its public key line, `fingerprint` (SHA256:…) and `agent` (whether ssh-agent signs)."
  (defn __init__ [self path line agent]
    (setv self.path path
          self.line line
          self.fingerprint (fingerprint (get (public-key line) 1))
          self.agent agent))
  (defn __repr__ [self]
    f"<signer {self.path} {self.fingerprint}{(if self.agent " (ssh-agent)" "")}>"))

(defn _first-line [path]
  (try
    (with [f (open path "rb")] (.decode (.readline f 4096) "utf-8" "replace"))
    (except [e OSError]
      (raise (ConsfigError f"cannot read the signing key {path}: {e.strerror}")))))

(defn _public-line [text path]
  (try (public-key text) text
       (except [e ValueError]
         (raise (ConsfigError f"{path}: {e}")))))

(defn signing-key [path]
  "The `Signer` of the file PATH: an OpenSSH private key (its public half
read from PATH.pub, or asked of ssh-keygen), or a public key whose private
half is in the ssh-agent at $SSH_AUTH_SOCK."
  (setv path (os.fspath path)
        first (.strip (_first-line path)))
  (cond
    (.startswith first LEGACY-KEY-PREFIX)
    (raise (ConsfigError (+ f"{path} is a public key of consfig's old format: sign with the "
                            "OpenSSH form of its private key (consfig keygen --from OLDKEY -o NEWKEY)")))
    (= first "-----BEGIN PRIVATE KEY-----")
    (raise (ConsfigError (+ f"{path} is a key of consfig's old format: convert it (consfig keygen "
                            "--from OLDKEY -o NEWKEY) to sign with it, or give it as --legacy-key "
                            "for hosts whose puller predates OpenSSH signatures (docs/images.md)")))
    (not (.startswith first "-----BEGIN "))
    (do (try (public-key first)
             (except [e ValueError]
               (raise (ConsfigError f"{path} is neither an OpenSSH private key nor a public key ({e})"))))
        (when (not (os.environ.get "SSH_AUTH_SOCK"))
          (raise (ConsfigError (+ f"{path} is a public key, so its private half must be in "
                                  "ssh-agent, and SSH_AUTH_SOCK is not set: start ssh-agent "
                                  "and ssh-add the key, or give the private key"))))
        (Signer path first True))
    (os.path.exists (+ path ".pub"))
    (Signer path (_public-line (.strip (_first-line (+ path ".pub"))) (+ path ".pub")) False)
    True
    (Signer path (_public-line (.strip (.decode (. (_ssh-keygen ["-y" "-f" path]
                                                                f"cannot read the public key of {path}")
                                                   stdout)
                                                "utf-8" "replace"))
                               path)
            False)))

(defn sign-statements [signer statements]
  "The armored SSH signatures of STATEMENTS (a list of bytes) by SIGNER, in
the consfig-image namespace: one ssh-keygen for them all, so that a key
with a passphrase asks for it once."
  (when (not statements)
    (return []))
  (with [scratch (tempfile.TemporaryDirectory :prefix "consfig-sign-")]
    (setv paths (lfor i (range (len statements)) (os.path.join scratch f"statement{i}")))
    (for [[p s] (zip paths statements)]
      (with [f (open p "wb")] (.write f s)))
    (_ssh-keygen ["-Y" "sign" "-n" NAMESPACE "-f" signer.path #* paths]
                 (+ f"cannot sign with {signer.path}"
                    (if signer.agent
                        " (a public key: its private half must be loaded in ssh-agent, ssh-add)"
                        ""))
                 :timeout SIGN-TIMEOUT)
    (lfor p paths (with [f (open (+ p ".sig") "rb")] (.read f)))))

(defn sign-image [signer host image [published None] * [valid-for VALID-FOR]]
  "The signature file for IMAGE (bytes), HOST's image, signed by SIGNER (a
`Signer`), valid for VALID-FOR seconds from its publication (hosts refuse
it after)."
  (setv statement (_statement signer host image (or published (_now)) valid-for))
  (signature-file statement (get (sign-statements signer [statement]) 0)))

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

(defn _plus [published seconds]
  (.strftime (+ (datetime.datetime.strptime published "%Y-%m-%dT%H:%M:%S.%fZ")
                (datetime.timedelta :seconds seconds))
             "%Y-%m-%dT%H:%M:%S.%fZ"))

(defn _statement [signer host image published valid-for]
  (statement-bytes host (.hexdigest (hashlib.sha256 image)) (len image) published
                   (_plus published valid-for) signer.fingerprint))

(defn legacy-signature [key fields]
  "The signature file of consfig's old format (what pullers before OpenSSH
signatures read at URL/HOST.sig) for the statement FIELDS (host, sha256,
size, published, expires), signed with KEY (`load-legacy-key`)."
  (setv raw (.public-bytes (.public-key key) serialization.Encoding.Raw
                           serialization.PublicFormat.Raw)
        statement (.encode (+ f"{LEGACY-FORMAT}\nhost {(get fields "host")}\n"
                              f"sha256 {(get fields "sha256")}\nsize {(get fields "size")}\n"
                              f"published {(get fields "published")}\n"
                              f"expires {(get fields "expires")}\n"
                              f"key {(cut (.hexdigest (hashlib.sha256 raw)) 16)}\n")))
  (+ statement b"signature " (base64.b64encode (.sign key statement)) b"\n"))

(defn _read [path]
  (try (with [f (open path "rb")] (.read f))
       (except [FileNotFoundError] None)))

(defn _current [directory host image signers valid-for]
  ;; The fields of HOST's published signature when it still vouches, with
  ;; the signer's key (the only one SIGNERS lists), for exactly IMAGE; else
  ;; None.
  (setv sig (_read (os.path.join directory (+ host SUFFIX))))
  (when (and sig (= (_read (os.path.join directory host)) image))
    (try
      (setv fields (check-statement sig signers host))
      ;; Signed again, with a new expiry, once half its validity is gone:
      ;; a site publishing as often as that never lets its hosts'
      ;; statements expire.
      (when (and (= (get fields "sha256") (.hexdigest (hashlib.sha256 image)))
                 (> (get fields "expires") (_plus (_now) (// valid-for 2))))
        (return fields))
      (except [Refused]))))

(defn _previous-published [directory host]
  ;; The latest publication time either signature file of HOST states.
  (max (gfor suffix [SUFFIX LEGACY-SUFFIX]
             :setv sig (_read (os.path.join directory (+ host suffix)))
             :setv m (when sig (re.search rb"\npublished (\S+)\n" sig))
             (if m (.decode (.group m 1) "ascii" "replace") ""))))

(defn _index [directory]
  (setv data (_read (os.path.join directory INDEX)))
  (try
    (setv index (json.loads (or data "{}")))
    (except [ValueError]
      (raise (ConsfigError f"{(os.path.join directory INDEX)} is not JSON; remove it to start a new index"))))
  (if (= (.get index "format") INDEX-FORMAT) index {"format" INDEX-FORMAT "hosts" {}}))

(defn publish-images [images directory signer * [private #()] [valid-for VALID-FOR]
                      [legacy-key None]]
  "Publish IMAGES (a dict: hostname → the image's bytes) in DIRECTORY,
signed by SIGNER (a `Signer`, see `signing-key`), each statement valid for
VALID-FOR seconds (a week); the images of the hosts in PRIVATE (which hold
secrets) mode 0600, the rest 0644.  With LEGACY-KEY (`load-legacy-key`),
each statement is also signed the old way, as HOST.sig.  Every new
signature is checked before any file is written.  Return a list of `[host
sha256 changed?]`, one per host."
  (for [host images]
    (when (not (re.fullmatch _HOSTNAME host))
      (raise (ConsfigError f"{host !r} cannot be published: not a hostname usable as a file name"))))
  (os.makedirs directory :exist-ok True)
  (with [scratch (tempfile.TemporaryDirectory :prefix "consfig-publish-")]
    (setv signers (os.path.join scratch "allowed_signers"))
    (with [f (open signers "w")] (.write f (allowed-signers [signer.line] IDENTITY)))
    (setv hosts (sorted images)
          current (dfor h hosts h (_current directory h (get images h) signers valid-for))
          fresh (lfor h hosts :if (is (get current h) None) h)
          statements (lfor h fresh
                           (_statement signer h (get images h)
                                       (_after (_now) (_previous-published directory h))
                                       valid-for))
          signed {})
    (for [[host sig] (zip fresh (map signature-file statements (sign-statements signer statements)))]
      (try
        (setv (get current host) (check-statement sig signers host)
              (get signed host) sig)
        (except [e Refused]
          (raise (ConsfigError (+ f"the signature ssh-keygen made with {signer.path} does not check "
                                  f"with its public key {signer.fingerprint} ({e}): is that the "
                                  "public half of the key that signed?")))))))
  (setv index (_index directory)
        results [])
  (for [host hosts]
    (setv image (get images host)
          fields (get current host))
    (when (in host signed)
      ;; The image before its signature: a host that fetches in between
      ;; sees a mismatch and tries again once, rather than an old image
      ;; under a new signature.
      (write-atomically (os.path.join directory host) image
                        :mode (if (in host private) 0o600 0o644))
      (write-atomically (os.path.join directory (+ host SUFFIX)) (get signed host)))
    (setv legacy-path (os.path.join directory (+ host LEGACY-SUFFIX)))
    (if legacy-key
        (let [legacy (legacy-signature legacy-key fields)]
          ;; Ed25519 signs deterministically: an unchanged statement gives
          ;; the same file, left as it is.
          (when (!= legacy (_read legacy-path))
            (write-atomically legacy-path legacy)))
        (when (os.path.lexists legacy-path)
          (os.unlink legacy-path)))
    (setv (get index "hosts" host)
          (dfor k ["sha256" "size" "published" "key"] k (get fields k)))
    (.append results [host (get fields "sha256") (in host signed)]))
  (setv text (.encode (+ (json.dumps index :indent 1 :sort-keys True) "\n")))
  (when (!= text (_read (os.path.join directory INDEX)))
    (write-atomically (os.path.join directory INDEX) text))
  results)

(export :objects [keygen keygen-from load-legacy-key Signer signing-key sign-statements
                  sign-image legacy-signature publish-images])
