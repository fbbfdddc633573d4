"Nobody asserts as someone else: the site's CA, certificates for etcd's
members and for each host, and etcd's roles that let host H write only
under its own prefix.

  (make-ca DIR)                              DIR/ca.pem, DIR/ca.key
  (issue DIR \"m0\" :server-ips [\"10.0.0.1\"])  DIR/m0.pem, DIR/m0.key: an etcd member
  (issue DIR \"web1.example.org\")             a host's client certificate (its CN the host)
  (grant-hosts ADMIN [\"web1.example.org\" …] DIR)   etcd users and roles, auth on
  (grant-site CONFIG DIR [\"web1.example.org\" …])   the same as root, for `consfig dataspace grant`

Keys and passwords are written mode 0600.  The certificates are TLS's:
who may connect.  Who may write where is etcd's authentication: etcd's JSON
gateway, which consfig speaks, ignores a client certificate's CN, so each
host is the etcd user of its name, with a password of its own, whose one
role may read the site's prefix and write PREFIX/hosts/HOSTNAME/ only."

(require hyrule [->])
(import base64
        datetime
        ipaddress
        os
        secrets
        consfig.errors [ConsfigError]
        consfig.util [write-atomically])

(defn _x509 []
  (import cryptography.x509 :as x509
          cryptography.hazmat.primitives.hashes :as hashes
          cryptography.hazmat.primitives.serialization :as ser
          cryptography.hazmat.primitives.asymmetric.ec :as ec
          cryptography.x509.oid :as oid)  ; lazy: the controller's, for a command run once
  #(x509 hashes ser ec oid))

(defn _write [path data [mode 0o644]]
  (write-atomically path data :mode mode))

(defn _name [cn]
  (setv #(x509 _ _ _ oid) (_x509))
  (x509.Name [(x509.NameAttribute oid.NameOID.COMMON_NAME cn)]))

(defn _key-pem [key]
  (setv #(_ _ ser _ _) (_x509))
  (.private-bytes key ser.Encoding.PEM ser.PrivateFormat.PKCS8 (ser.NoEncryption)))

(defn make-ca [directory [name "consfig dataspace CA"] [days 3650]]
  "Make the site's CA in DIRECTORY (ca.pem, ca.key), unless it is there."
  (setv #(x509 hashes ser ec _) (_x509)
        crt (os.path.join directory "ca.pem")
        keyp (os.path.join directory "ca.key"))
  (when (os.path.exists crt) (return crt))
  (os.makedirs directory :mode 0o700 :exist-ok True)
  (setv key (ec.generate-private-key (ec.SECP256R1))
        now (datetime.datetime.now datetime.timezone.utc)
        cert (-> (x509.CertificateBuilder)
                 (.subject-name (_name name)) (.issuer-name (_name name))
                 (.public-key (.public-key key))
                 (.serial-number (x509.random-serial-number))
                 (.not-valid-before (- now (datetime.timedelta :minutes 5)))
                 (.not-valid-after (+ now (datetime.timedelta :days days)))
                 (.add-extension (x509.BasicConstraints :ca True :path-length 0) :critical True)
                 ;; What a strict verifier (Python's ssl) asks of a CA.
                 (.add-extension (x509.KeyUsage :digital-signature True :content-commitment False
                                                :key-encipherment False :data-encipherment False
                                                :key-agreement False :key-cert-sign True
                                                :crl-sign True :encipher-only False
                                                :decipher-only False)
                                 :critical True)
                 (.add-extension (x509.SubjectKeyIdentifier.from-public-key (.public-key key))
                                 :critical False)
                 (.sign key (hashes.SHA256))))
  (_write keyp (_key-pem key) 0o600)
  (_write crt (.public-bytes cert ser.Encoding.PEM))
  crt)

(defn issue [directory name * [server-ips None] [days 825]]
  "Issue NAME's certificate, signed by the CA in DIRECTORY: DIRECTORY/NAME.pem
and NAME.key.  SERVER-IPS: it is an etcd member's, serving on those
addresses (and a client's too: members talk to each other); otherwise a
host's client certificate, its CN the hostname."
  (setv #(x509 hashes ser ec oid) (_x509))
  (when (or (not name) (in "/" name) (.startswith name "."))
    (raise (ConsfigError f"{name !r} cannot name a certificate")))
  (with [f (open (os.path.join directory "ca.key") "rb")]
    (setv ca-key (ser.load-pem-private-key (.read f) None)))
  (with [f (open (os.path.join directory "ca.pem") "rb")]
    (setv ca (x509.load-pem-x509-certificate (.read f))))
  (setv key (ec.generate-private-key (ec.SECP256R1))
        now (datetime.datetime.now datetime.timezone.utc)
        usages [oid.ExtendedKeyUsageOID.CLIENT_AUTH
                #* (if server-ips [oid.ExtendedKeyUsageOID.SERVER_AUTH] [])]
        b (-> (x509.CertificateBuilder)
              (.subject-name (_name name)) (.issuer-name ca.subject)
              (.public-key (.public-key key))
              (.serial-number (x509.random-serial-number))
              (.not-valid-before (- now (datetime.timedelta :minutes 5)))
              (.not-valid-after (+ now (datetime.timedelta :days days)))
              (.add-extension (x509.BasicConstraints :ca False :path-length None) :critical True)
              (.add-extension (x509.ExtendedKeyUsage usages) :critical False)
              (.add-extension (x509.AuthorityKeyIdentifier.from-issuer-public-key (.public-key ca-key))
                              :critical False)))
  (when server-ips
    (setv b (.add-extension b (x509.SubjectAlternativeName
                                [(x509.DNSName "localhost")
                                 #* (gfor ip server-ips (x509.IPAddress (ipaddress.ip-address ip)))])
                            :critical False)))
  (setv cert (.sign b ca-key (hashes.SHA256)))
  (_write (os.path.join directory f"{name}.key") (_key-pem key) 0o600)
  (_write (os.path.join directory f"{name}.pem") (.public-bytes cert ser.Encoding.PEM))
  (os.path.join directory f"{name}.pem"))

(defn _range-end [prefix]
  ;; etcd's range end of a prefix: its last byte plus one.
  (setv b (bytearray (.encode prefix "utf-8")))
  (setv (get b -1) (+ (get b -1) 1))
  (bytes b))

(defn grant-hosts [admin hostnames directory]
  "With ADMIN (a `Dataspace` of etcd before its authentication is on), make
each of HOSTNAMES an etcd user whose one role reads the site's prefix and
writes only under its own, and turn authentication on.  Each user's
password, and root's, is written to DIRECTORY/NAME.password (mode 0600):
deliver each to its host (as prerequisite data, say) and name it in the
site's :password-file."
  (defn b64 [x] (.decode (base64.b64encode (if (isinstance x bytes) x (.encode x "utf-8"))) "ascii"))
  (defn post [path body]
    (admin.call (fn [c] (.post c (.get-url c path) :json body))))
  (defn ensure [path body]
    (try (post path body)
         (except [e ConsfigError]
           (when (not-in "already exists" (str e)) (raise)))))
  (defn user [name]
    ;; A user etcd has already keeps its password, and its file: a grant
    ;; run again, for a host added later, changes no one else's.  The new
    ;; one is kept beside the file until etcd has taken it.
    (setv password (secrets.token-urlsafe 24)
          path (os.path.join directory f"{name}.password")
          new (+ path ".new"))
    (_write new (.encode password) 0o600)
    (try
      (post "/auth/user/add" {"name" name "password" password})
      (os.replace new path)
      (except [e ConsfigError]
        (os.unlink new)
        (when (not-in "already exists" (str e)) (raise)))))
  (os.makedirs directory :mode 0o700 :exist-ok True)
  (setv site (+ admin.prefix "/"))
  (user "root")
  (ensure "/auth/user/grant" {"user" "root" "role" "root"})
  (for [h hostnames]
    (setv role f"host-{h}"
          own (admin.host-prefix h))
    (ensure "/auth/role/add" {"name" role})
    (post "/auth/role/grant" {"name" role
                              "perm" {"permType" "READ" "key" (b64 site)
                                      "range_end" (b64 (_range-end site))}})
    (post "/auth/role/grant" {"name" role
                              "perm" {"permType" "READWRITE" "key" (b64 own)
                                      "range_end" (b64 (_range-end own))}})
    (user h)
    (ensure "/auth/user/grant" {"user" h "role" role}))
  (ensure "/auth/enable" {}))

(defn grant-site [config directory hostnames]
  "`grant-hosts` for the site's dataspace CONFIG (its endpoints and prefix),
as root: root's certificate and key from DIRECTORY (`consfig dataspace tls
DIR --host root`) when the site uses TLS, and root's password from there
once a first grant has written it.  Return the password files of
HOSTNAMES."
  (import consfig.apply.dataspace [Dataspace])  ; lazy: the controller's
  (setv admin {"endpoints" (get config "endpoints") "prefix" (get config "prefix")}
        in-dir (fn [name] (os.path.join directory name)))
  (when (.get config "ca")
    (for [[option name] [["ca" "ca.pem"] ["cert" "root.pem"] ["key" "root.key"]]]
      (when (not (os.path.exists (in-dir name)))
        (raise (ConsfigError (+ f"{(in-dir name)} is missing: the site's etcd takes TLS, and root "
                                f"needs its certificate (consfig dataspace tls {directory} --host root)"))))
      (setv (get admin option) (in-dir name))))
  (when (os.path.exists (in-dir "root.password"))
    (setv (get admin "password-file") (in-dir "root.password")))
  (grant-hosts (Dataspace admin "root") hostnames directory)
  (lfor h hostnames (in-dir f"{h}.password")))

(export :objects [make-ca issue grant-hosts grant-site])
