"TLS certificates and their private keys, from prerequisite data.

A certificate (with its chain) goes to /etc/ssl/certs/NAME.pem, readable by
all; its key, a secret, to /etc/ssl/private/NAME.key, mode 0640, owned by
root and the group ssl-cert, as Debian keeps keys that daemons read after
dropping root (nginx, Apache, postfix, exim: add their user to ssl-cert).
Neither is ever in the propspec, an event or a diff; the key is compared in
memory, and reaches openssl only on its standard input.

Let's Encrypt (ACME) is not here: a certificate comes from the site's data,
however the site obtains it."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import posixpath
        consfig.apply.actions [NO-CHANGE run run-ok?]
        consfig.data.items [get-data-bytes require-data]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.model.host [get-hostname]
        consfig.props.file [install-data read-bytes]
        consfig.types *)

(setv certificate-name (matching "certificate-name"
                                 "a certificate name (letters, digits, _ . and -, not starting with . or -), such as \"www.example.org\""
                                 r"[A-Za-z0-9_][A-Za-z0-9_.-]*"))

(setv CERTS "/etc/ssl/certs"
      PRIVATE "/etc/ssl/private")

(defn certificate-path [name] (posixpath.join CERTS (+ name ".pem")))
(defn key-path [name] (posixpath.join PRIVATE (+ name ".key")))

(defn _items [name iden1]
  ;; The certificate's item and the key's, named by where they go.
  (setv i1 (or iden1 (get-hostname)))
  #(#(i1 (certificate-path name)) #(i1 (key-path name))))

(defn _public-key [argv input what]
  ;; The public key openssl finds in INPUT (a certificate or a private key,
  ;; given on standard input), in PEM.
  (setv r (run #* argv :input input :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "openssl is not installed here (apt.installed \"openssl\")")))
  (when (not r.ok?)
    (raise (FailedChange f"{what} is not one openssl can read")))
  r.stdout)

(defn check-pair [certificate key cert-item key-item]
  "Fail unless CERTIFICATE (PEM bytes, with its chain after it) is a
certificate whose public key is that of KEY (PEM bytes, a private key):
openssl on the target reads both, the key on its standard input.  Warn of a
certificate that has expired."
  (setv #(c1 c2) cert-item
        #(k1 k2) key-item)
  (when (not-in b"-----BEGIN CERTIFICATE-----" certificate)
    (raise (FailedChange f"the data item ({c1} {c2}) is not a PEM certificate")))
  (setv from-cert (_public-key ["openssl" "x509" "-noout" "-pubkey"] certificate
                               f"the certificate ({c1} {c2})")
        from-key (_public-key ["openssl" "pkey" "-pubout"] key
                              f"the private key ({k1} {k2}) (its content is not shown)"))
  (when (!= from-cert from-key)
    (raise (FailedChange (+ f"the private key ({k1} {k2}) is not the key of the certificate "
                            f"({c1} {c2}); neither is installed"))))
  (when (not (run-ok? "openssl" "x509" "-noout" "-checkend" "0" :input certificate :timeout 60))
    (inform f"warning: the certificate ({c1} {c2}) has expired")))

(defn _combined [results]
  (cond (in WOULD-CHANGE results) WOULD-CHANGE
        (all (gfor r results (= r NO-CHANGE))) NO-CHANGE
        True None))

(defprop certificate-installed :posix [#^ certificate-name name
                                       * #^ (optional non-empty-line) [iden1 None]
                                       #^ (optional group-name) [key-group "ssl-cert"]]
  "The certificate NAME and its private key are installed from
prerequisite data: /etc/ssl/certs/NAME.pem (mode 0644) is the item (IDEN1,
/etc/ssl/certs/NAME.pem), the certificate followed by its chain, and
/etc/ssl/private/NAME.key is the secret (IDEN1, /etc/ssl/private/NAME.key),
mode 0640, owned by root and KEY-GROUP (`ssl-cert`, from the package of
that name), or 0600 and root's alone when KEY-GROUP is None.  IDEN1 is the
host's name unless given (\"_web\" for a certificate several hosts share).
Before either is written, openssl checks that the key is the
certificate's; a pair that does not match fails and changes nothing.  A
service reads a new certificate when it reloads: `(on-change
(tls.certificate-installed …) (nginx.reloaded))`.  Unapplying removes
both."
  (:simulates True)
  (:desc f"TLS certificate {name} installed")
  (:watch [(watch-path (certificate-path name)) (watch-path (key-path name))])
  (:hostattrs (setv #(cert key) (_items name iden1))
              (require-data #* cert)
              (require-data #* key :secret True))
  (:apply
    (setv #(cert key) (_items name iden1)
          certificate (get-data-bytes #* cert)
          private (.reveal (get-data-bytes #* key)))
    (when (and key-group (not (run-ok? "getent" "group" "--" key-group :timeout 60)))
      (raise (FailedChange (+ f"there is no group {key-group} for {(key-path name)}: "
                              (if (= key-group "ssl-cert")
                                  "install ssl-cert (apt.installed \"ssl-cert\")"
                                  "create it (user.group-exists)")
                              ", or give :key-group None"))))
    (when (and (not (checking?))
               (or (!= (read-bytes (certificate-path name)) certificate)
                   (!= (read-bytes (key-path name)) private)))
      (check-pair certificate private cert key)
      (run "mkdir" "-p" "--" CERTS :timeout 60)
      (when (not (run-ok? "test" "-d" PRIVATE :timeout 60))
        (run "mkdir" "-p" "-m" "0700" "--" PRIVATE :timeout 60)))
    (_combined [(install-data #* key (key-path name) :mode (if key-group 0o640 0o600)
                              :owner "root" :group (or key-group "root"))
                (install-data #* cert (certificate-path name) :mode 0o644
                              :owner "root" :group "root")]))
  (:unapply
    (setv paths (lfor p [(certificate-path name) (key-path name)] :if (run-ok? "test" "-e" p) p))
    (cond (not paths) NO-CHANGE
          (checking?) (do (inform f"{(.join ", " paths)} would be removed") WOULD-CHANGE)
          True (run "rm" "-f" "--" #* paths :timeout 60))))

(export :objects [certificate-installed certificate-path key-path check-pair
                  certificate-name])
