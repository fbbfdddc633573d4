"GnuPG: public keys in a user's keyring, named by their fingerprints.

Key material, given in the consfig or held as prerequisite data, is read by
gpg in an empty keyring of its own first: it must be the one public key the
property names, no other and no secret key, or nothing is imported.  gpg
runs as the user whose keyring it is, so ~/.gnupg stays theirs, and never
starts gpg-agent or dirmngr."

(eval-when-compile (require consfig.model.property [defprop]))
(import re
        consfig.apply.actions [Script run run-ok?]
        consfig.data.items [get-data-bytes require-data]
        consfig.apply.engine [Drift]
        consfig.errors [FailedChange]
        consfig.props.user [as-user home-directory]
        consfig.types *)

(setv pgp-fingerprint (predicate "pgp-fingerprint"
                                 (+ "an OpenPGP fingerprint: 40 hexadecimal digits (64 for a v5 key), "
                                    "spaces between them allowed")
                                 (fn [v] (and (.accepts line v)
                                              (re.fullmatch r"[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64}"
                                                            (re.sub " " "" v))))))

(defn normal-fingerprint [fingerprint]
  "FINGERPRINT without spaces, in upper case, as gpg prints it."
  (.upper (re.sub r"\s" "" fingerprint)))

(setv _GPG ["gpg" "--batch" "--no-autostart" "--with-colons"])

(defn _listing [text]
  ;; What a colon listing says of keys, as a set to compare material with
  ;; a keyring: each primary key and subkey with its expiry, whether it is
  ;; revoked, each user id.  Trust and validity, which differ between a
  ;; keyring and loose material, are left out.
  (setv out (set)
        pending None
        primaries [])
  (for [line (.splitlines text)]
    (setv f (.split line ":"))
    (cond (in (get f 0) #("pub" "sub" "sec" "ssb"))
          (setv pending f)
          (and (= (get f 0) "fpr") pending)
          (do (setv fpr (get f 9))
              (.add out #((get pending 0) fpr (get pending 6)))
              (when (= (get pending 1) "r") (.add out #("revoked" fpr)))
              (when (in (get pending 0) #("pub" "sec")) (.append primaries #((get pending 0) fpr)))
              (setv pending None))
          (= (get f 0) "uid")
          (.add out #("uid" (get f 7)))))
  #(out primaries))

(defn read-key-material [material]
  "What gpg reads in MATERIAL (bytes), in an empty keyring of its own made
for it and removed after: `(records primaries)`, as `_listing` gives."
  (setv r (run (Script (+ "d=$(mktemp -d) || exit 1\n"
                          "trap 'rm -rf \"$d\"' EXIT\n"
                          "gpg --homedir \"$d\" \"$@\"")
                       #* (cut _GPG 1 None) "--show-keys")
               :input material :check False :timeout 120))
  (when (= r.exit-code 127)
    (raise (FailedChange "gpg is not installed here (apt.installed \"gnupg\")")))
  (_listing (if r.ok? r.stdout "")))

(defn _material [fingerprint key]
  (if (is key None)
      (get-data-bytes "--pgp-key" fingerprint)
      (.encode key "utf-8")))

(defn _checked-material [fingerprint key]
  ;; The material and what it holds, once it is known to be FINGERPRINT's
  ;; public key and nothing else.
  (setv material (_material fingerprint key)
        #(records primaries) (read-key-material material)
        source (if (is key None) f"the data item (--pgp-key {fingerprint})" "the key given"))
  (cond (not primaries)
        (raise (FailedChange f"{source} is not an OpenPGP key that gpg can read"))
        (any (gfor [kind _] primaries (= kind "sec")))
        (raise (FailedChange f"{source} is a secret key; give the public key alone (gpg --export --armor)"))
        (!= (lfor [_ f] primaries f) [fingerprint])
        (raise (FailedChange (+ f"{source} is not the key {fingerprint} alone: it holds "
                                (.join ", " (gfor [_ f] primaries f))))))
  #(material records))

(defn _has-keyring? [user]
  ;; Without a keyring, asking gpg would make one: not in a check.
  (setv home (home-directory user))
  (run-ok? (Script "[ -e \"$1/.gnupg/pubring.kbx\" ] || [ -e \"$1/.gnupg/pubring.gpg\" ]" home)
           :timeout 60))

(defn keyring-listing [user fingerprint]
  "What USER's keyring holds of the key FINGERPRINT, as `_listing` gives;
empty when it does not have it."
  (if (_has-keyring? user)
      (let [r (run (as-user user [#* _GPG "--list-keys" "--" fingerprint]) :check False :timeout 120)]
        (get (_listing (if r.ok? r.stdout "")) 0))
      (set)))

(defprop has-public-key :posix [#^ user-name user #^ pgp-fingerprint fingerprint
                                #^ (optional text) [key None]]
  "USER's GnuPG keyring (~USER/.gnupg) holds the public key FINGERPRINT:
KEY, ASCII-armoured (`gpg --export --armor FINGERPRINT`), or else the
prerequisite data item (--pgp-key FINGERPRINT).  The material must be that
key alone, no other and no secret key, or nothing is imported.  It is
imported again when it holds what the keyring lacks (a new subkey, user
id, expiry or revocation).  Trust is not set.  Unapplying deletes the
public key from the keyring (gpg refuses while USER has its secret key)."
  (:unwatched "a keyring in gpg's own format, in a home found on the target: re-checked at the host's interval")
  (:desc f"{user} has PGP key {(normal-fingerprint fingerprint)}")
  (:preprocess [user (normal-fingerprint fingerprint) key])
  (:hostattrs (when (is key None) (require-data "--pgp-key" fingerprint)))
  (:check
    (setv #(_ records) (_checked-material fingerprint key)
          have (keyring-listing user fingerprint))
    (cond (not have) (Drift f"{user}'s keyring would get {fingerprint}")
          (<= records have) True
          True (Drift f"{user}'s copy of {fingerprint} would be updated")))
  (:apply
    (setv #(material _) (_checked-material fingerprint key)
          r (run (as-user user ["gpg" "--batch" "--no-autostart" "--import"])
                 :input material :check False :timeout 120))
    (when (not r.ok?)
      (raise (FailedChange f"gpg --import as {user} failed: {(.strip (+ r.stdout r.stderr))}")))
    None)
  (:unapply
    (setv r (run (as-user user ["gpg" "--batch" "--no-autostart" "--yes" "--delete-keys" "--"
                                fingerprint])
                 :check False :timeout 120))
    (when (not r.ok?)
      (raise (FailedChange f"gpg --delete-keys as {user} failed: {(.strip (+ r.stdout r.stderr))}")))
    None))

(export :objects [has-public-key normal-fingerprint read-key-material keyring-listing
                  pgp-fingerprint])
