"Certificates from an ACME CA (Let's Encrypt, or one of your own), with
certbot and the HTTP-01 challenge answered from a web root that the web
server consfig manages serves.

  (use-props consfig.props [acme nginx])
  (acme.installed)
  (on-change (acme.certificate \"www\" [\"example.org\" \"www.example.org\"]
                               :webroot \"/var/www/acme\" :email \"admin@example.org\")
    (systemd.reloaded \"nginx\"))

certbot writes /etc/letsencrypt/live/NAME/{fullchain,privkey}.pem (the key
mode 0600, root's).  The certificate holds when it is there, names exactly
the domains asked for, and is good for more than RENEW-BEFORE days (30);
otherwise certbot asks the CA for a new one.  A failed challenge fails the
property and leaves the certificate there as it was, consumers untouched.

Why certbot: it is Debian's, kept with its ACME library (python3-acme)
through stable's updates, and its files are where every guide looks.

Renewal: the certificate is re-checked every 12 hours by the converging
agent (its watch is a poll), or by whatever re-applies the host on a timer
(`cron.runs-consfig`, `image.pulled-from`); a renewal is a change, so
`on-change` and `notifies` reload the certificate's consumers.  Debian's
own certbot.timer renews too, without them: mask it (`systemd.masked
\"certbot.timer\"`) to leave renewal to consfig."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.apply.actions [NO-CHANGE run run-ok?]
        consfig.apply.engine [Drift WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.model.watchspec [watch-poll]
        consfig.props.apt :as apt
        consfig.types *)

(setv cert-name (matching "cert-name" "a certificate name (letters, digits, _ . and -, not starting with - or .)"
                          r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
      domain (matching "domain" "a domain name (labels of letters, digits and -, separated by dots)"
                       r"(?=.{1,253}$)(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
      email (matching "email" "an email address (user@domain, no whitespace)"
                      r"[A-Za-z0-9_.+=-]+@[A-Za-z0-9][A-Za-z0-9.-]*")
      key-kind (enum "ecdsa" "rsa")
      server-url (matching "server-url" "an https:// URL of an ACME directory"
                           r"https://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+"))

(setv LETS-ENCRYPT "https://acme-v02.api.letsencrypt.org/directory")

(defproplist installed :posix []
  "certbot is installed."
  (:desc "certbot installed")
  (apt.installed "certbot"))

(defn live-path [config-dir name file]
  (+ config-dir "/live/" name "/" file))

(defn _names [config-dir name]
  ;; The DNS names the live certificate NAME holds, or None when it has none.
  (setv r (run "openssl" "x509" "-noout" "-ext" "subjectAltName" "-in" (live-path config-dir name "cert.pem")
               :check False :timeout 60))
  (when r.ok?
    (sorted (gfor w (.split (.replace r.stdout "," " ")) :if (.startswith w "DNS:") (cut w 4 None)))))

(defn _holds [config-dir name domains renew-before]
  (setv names (_names config-dir name))
  (cond (is names None) (Drift f"there is no certificate {name}")
        (!= names (sorted domains)) (Drift f"certificate {name} names {(.join ", " names)}, not {(.join ", " (sorted domains))}")
        (not (run-ok? "openssl" "x509" "-noout" "-checkend" (str (* renew-before 86400))
                      "-in" (live-path config-dir name "cert.pem") :timeout 60))
        (Drift f"certificate {name} expires within {renew-before} days")
        True True))

(defn _obtain [name domains webroot server mail ca-bundle config-dir renew-before key-type]
  (setv held (_holds config-dir name domains renew-before))
  (when (is held True) (return NO-CHANGE))
  (when (checking?)
    (inform (+ held.explanation f": one would be asked of {server}"))
    (return WOULD-CHANGE))
  (setv argv ["certbot" "certonly" "--non-interactive" "--agree-tos" "--quiet"
              "--cert-name" name "--server" server
              "--webroot" "--webroot-path" webroot
              "--config-dir" config-dir
              "--work-dir" (+ config-dir "/.work") "--logs-dir" (+ config-dir "/.logs")
              "--key-type" key-type.name
              ;; What held is not good enough: a new one, whatever certbot thinks.
              "--force-renewal"
              #* (if mail ["--email" mail] ["--register-unsafely-without-email"])
              #* (sum (gfor d domains ["--domain" d]) [])]
        r (run #* argv :env (if ca-bundle {"REQUESTS_CA_BUNDLE" ca-bundle} None)
               :check False :timeout 600))
  (when (= r.exit-code 127)
    (raise (FailedChange "certbot is not there: (acme.installed) first")))
  (when (not r.ok?)
    (raise (FailedChange (+ f"certbot could not get certificate {name}; what was there is as it was:\n"
                            (.strip (+ r.stderr r.stdout))))))
  (inform f"certificate {name} from {server}: {(.join ", " domains)}")
  None)

(defprop certificate :posix [#^ cert-name name #^ (non-empty-list-of domain) domains
                             * #^ abs-path webroot #^ server-url [server LETS-ENCRYPT]
                             #^ (optional email) [email None] #^ (optional abs-path) [ca-bundle None]
                             #^ abs-path [config-dir "/etc/letsencrypt"]
                             #^ (int-range 1 3650) [renew-before 30]
                             #^ key-kind [key-type :ecdsa]]
  "The certificate NAME, for DOMAINS, from the ACME CA at SERVER (Let's
Encrypt's unless told), is in CONFIG-DIR/live/NAME and good for more than
RENEW-BEFORE days; else certbot gets one, answering HTTP-01 by writing in
WEBROOT/.well-known/acme-challenge, which the web server must serve for
each domain on port 80.  EMAIL is the account's contact.  CA-BUNDLE trusts
a private CA's HTTPS (REQUESTS_CA_BUNDLE).  A failure leaves what was there
(see `consfig.props.acme`)."
  (:desc f"certificate {name} for {(.join ", " domains)}")
  (:watch [(watch-poll 43200)])
  (:simulates True)
  (:apply (_obtain name domains webroot server email ca-bundle config-dir renew-before key-type)))

(export :objects [installed certificate live-path LETS-ENCRYPT])
