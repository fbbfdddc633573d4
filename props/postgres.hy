"PostgreSQL on Debian: clusters, roles, databases and pg_hba.conf lines.

Clusters are Debian's (postgresql-common): made with pg_createcluster,
listed by pg_lsclusters, and named VERSION/NAME (\"15/main\").  A property
that takes `:cluster` acts on that one; without it, on the host's only
cluster, and fails when there are several.

Roles and databases are changed through the cluster's server, which must be
running: they do not start it.  SQL runs as the postgres user (the
connection must be root or postgres), through psql on standard input, and
the names a consfig gives go in as psql variables that psql quotes itself,
never spliced into the SQL.  A role's password comes from prerequisite data;
consfig turns it into a SCRAM-SHA-256 verifier before anything is sent, so
the password itself never reaches the target."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path watch-poll watching-on-target?])
(import base64
        hashlib
        hmac
        os
        posixpath
        re
        stringprep
        unicodedata
        consfig.apply.actions [NO-CHANGE run]
        consfig.data.items [get-data-string require-data]
        consfig.apply.engine [Drift checking?]
        consfig.errors [FailedChange]
        consfig.model.host [get-hostname]
        consfig.props.apt :as apt
        consfig.props.file [read-text update-file]
        consfig.props.service [no-services? skip-for-no-services]
        consfig.props.user [as-user]
        consfig.types *)

(setv pg-version (named "pg-version" (one-of (matching "" "" r"[0-9]{1,3}") (int-range 1 999))
                        "a PostgreSQL major version (\"15\" or 15)")
      cluster-name (matching "cluster-name"
                             "a cluster name (letters, digits, _ and -, not starting with -)"
                             r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")
      cluster (matching "cluster" "a cluster as VERSION/NAME, such as \"15/main\""
                        r"[0-9]{1,3}/[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")
      ;; PostgreSQL cuts identifiers at 63 bytes: a longer name would be
      ;; created under another one, and never found again.
      pg-name (predicate "pg-name"
                         "a PostgreSQL name (one line, 1 to 63 bytes of UTF-8, no NUL)"
                         (fn [v] (and (isinstance v str) (.accepts non-empty-line v)
                                      (<= (len (.encode v "utf-8")) 63))))
      pg-encoding (matching "pg-encoding" "an encoding name such as \"UTF8\" or \"LATIN1\""
                            r"[A-Za-z][A-Za-z0-9_-]*")
      pg-locale (matching "pg-locale" "a locale name such as \"C.UTF-8\" or \"en_GB.UTF-8\""
                          r"[A-Za-z][A-Za-z0-9_.@-]*")
      port (named "port" (int-range 1 65535) "a TCP port (1 to 65535)")
      hba-line (predicate "hba-line"
                          (+ "a pg_hba.conf rule on one line: local, host, hostssl, hostnossl, "
                             "hostgssenc or hostnogssenc, then its fields (no comment)")
                          (fn [v] (and (.accepts line v) (not-in "#" v)
                                       (>= (len (.split v)) 4)
                                       (in (get (.split v) 0)
                                           #("local" "host" "hostssl" "hostnossl"
                                             "hostgssenc" "hostnogssenc"))))))

(defproplist installed :posix []
  "PostgreSQL's server and client are installed (Debian's `postgresql`,
which makes a cluster `main` of its version unless
/etc/postgresql-common/createcluster.conf says not to)."
  (:desc "PostgreSQL installed")
  (apt.installed "postgresql"))

(defn clusters []
  "The clusters on the target, as `pg_lsclusters` lists them: a list of dicts
with \"version\", \"name\", \"port\", \"status\" (\"online\", \"down\", …)
and \"data\" (its data directory)."
  (setv r (run "pg_lsclusters" "-h" :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange "pg_lsclusters is not there: install PostgreSQL first (postgres.installed)")))
  (when (not r.ok?)
    (raise (FailedChange f"pg_lsclusters failed: {(.strip (+ r.stdout r.stderr))}")))
  (lfor l (.splitlines r.stdout) :if (>= (len (.split l)) 4)
        (dict (zip ["version" "name" "port" "status" "owner" "data"] (cut (.split l) 6)))))

(defn _find [clusters version name]
  (next (gfor c clusters :if (and (= (get c "version") version) (= (get c "name") name)) c)
        None))

(defn resolve-cluster [given [have None]]
  "The cluster GIVEN as \"VERSION/NAME\", or the only one there is, among
HAVE (`clusters`, asked when not given); a failure when it is not there, or
when none is given and there are several."
  (when (is have None) (setv have (clusters)))
  (if given
      (do (setv #(version name) (.split given "/"))
          (when (not (_find have version name))
            (raise (FailedChange (+ f"there is no PostgreSQL cluster {given}"
                                    (if have f" (there is {(_listed have)})" "")
                                    "; make it with postgres.cluster-present"))))
          given)
      (cond (= (len have) 1) (_id (get have 0))
            (not have) (raise (FailedChange "there is no PostgreSQL cluster; make one with postgres.cluster-present"))
            True (raise (FailedChange f"there are several PostgreSQL clusters ({(_listed have)}): say which with :cluster")))))

(defn _id [c] f"{(get c "version")}/{(get c "name")}")

(defn _listed [clusters] (.join ", " (map _id clusters)))

(defn psql [cluster sql #** vars]
  "Run SQL (given to psql on standard input, in one session) as the
postgres user in the database `postgres` of CLUSTER (\"VERSION/NAME\"), and
return its output: unaligned rows, their fields separated by NUL.  Each of
VARS is a psql variable, for the SQL to use as `:\"name\"` (an identifier)
or `:'name'` (a literal), quoted by psql.  A failure carries psql's error,
with what to do when the server is not running."
  (setv r (run (as-user "postgres" ["psql" "--cluster" cluster "-X" "-q" "-A" "-t" "-z"
                                     "-v" "ON_ERROR_STOP=1" "-d" "postgres"
                                     #* (sum (gfor [k v] (.items vars) ["-v" f"{k}={v}"]) [])])
               :input sql :check False :timeout 300))
  (when (not r.ok?)
    (setv err (.strip (+ r.stderr r.stdout)))
    (raise (FailedChange
             (+ f"psql on cluster {cluster} failed: {err}"
                (if (or (in "Is the server running" err) (in "is not running" err)
                        (in "could not connect" err))
                    (+ f"\nthe server of {cluster} is not running: start it "
                       f"(pg_ctlcluster {(.replace cluster "/" " ")} start) before these properties")
                    "")))))
  r.stdout)

(defn _rows [out]
  (lfor l (.splitlines out) (.split l "\x00")))

(defn _flag [b] (if b "t" "f"))

;; Clusters

;; How often the agent re-checks what lives in a server (roles, databases,
;; a cluster's state): nothing outside it says when they change.
(setv POLL 2)

(defn _databases-watch [cluster]
  ;; The directory a database's files come and go in, `base/` of the
  ;; cluster's data directory: watched by the agent on the target, where the
  ;; cluster is there when it starts (`watching-on-target?`).  Elsewhere, or
  ;; with no such cluster yet, nothing: the poll finds it.
  (when (not (watching-on-target?)) (return []))
  (try
    (setv have (clusters)
          #(version name) (.split (resolve-cluster cluster have) "/")
          data (.get (_find have version name) "data" ""))
    (except [FailedChange] (return [])))
  (if (.startswith data "/")
      [(watch-path (+ (.rstrip data "/") "/base"))]
      []))

(defn _stopped? [c]
  ;; A cluster that is down, where services may be started: it is to run.
  (and (not (.startswith (get c "status") "online")) (not (no-services?))))

(defn _cluster-options [port encoding locale]
  (+ (if port ["--port" (str port)] [])
     (if encoding ["--encoding" encoding] [])
     (if locale ["--locale" locale] [])))

(defprop cluster-present :posix [#^ pg-version version #^ cluster-name name
                                 * #^ (optional port) [port None]
                                 #^ (optional pg-encoding) [encoding None]
                                 #^ (optional pg-locale) [locale None]]
  "There is a PostgreSQL cluster VERSION/NAME (made with pg_createcluster,
with PORT, ENCODING and LOCALE when given, else Debian's defaults), and,
where services may be started, it is running.  The server package of
VERSION must be installed.  A cluster that is there on another port than
PORT is a failure: the port is in its postgresql.conf.  Never unapplied:
that would delete its databases (pg_dropcluster does it by hand).  A
cluster that is there but stopped is started, where services may be."
  (:desc f"PostgreSQL cluster {version}/{name}")
  (:watch [(watch-poll POLL)])
  (:check
    (setv c (_find (clusters) (str version) name))
    (cond (not c) (Drift f"cluster {version}/{name} would be created")
          (and port (!= (get c "port") (str port)))
          (Drift f"cluster {version}/{name} is on port {(get c "port")}, not {port}")
          (_stopped? c) (Drift f"cluster {version}/{name} is {(get c "status")}: it would be started")
          True True))
  (:apply
    (setv c (_find (clusters) (str version) name))
    (when (and c port (!= (get c "port") (str port)))
      (raise (FailedChange (+ f"cluster {version}/{name} is there on port {(get c "port")}, not {port}: "
                              f"set port in /etc/postgresql/{version}/{name}/postgresql.conf "
                              "and restart it, or choose another name"))))
    (when (not c)
      (run "pg_createcluster" #* (_cluster-options port encoding locale) "--" (str version) name
           :timeout 600))
    (cond (and c (no-services?)) NO-CHANGE
          (no-services?) (do (skip-for-no-services f"starting cluster {version}/{name}") None)
          (or (not c) (_stopped? c))
          (do (run "pg_ctlcluster" (str version) name "start" :timeout 300) None)
          True NO-CHANGE)))

;; Roles

(setv _ROLE-ATTRIBUTES [["login" "rolcanlogin" "LOGIN"]
                        ["createdb" "rolcreatedb" "CREATEDB"]
                        ["createrole" "rolcreaterole" "CREATEROLE"]
                        ["superuser" "rolsuper" "SUPERUSER"]])

(defn _role [cluster role]
  ;; The role's attributes, {"login" "t", …}, or None when there is none.
  (setv rows (_rows (psql cluster (+ "SELECT " (.join ", " (gfor [_ col _] _ROLE-ATTRIBUTES col))
                                     " FROM pg_roles WHERE rolname = :'role';\n")
                          :role role)))
  (when rows (dict (zip (gfor [k _ _] _ROLE-ATTRIBUTES k) (get rows 0)))))

(defn _attributes-sql [wanted]
  (.join " " (gfor [k _ kw] _ROLE-ATTRIBUTES :if (is-not (get wanted k) None)
                   (if (get wanted k) kw (+ "NO" kw)))))

(defn _role-drift [have wanted role]
  (if (is have None)
      (Drift f"role {role} would be created")
      (do (setv wrong (lfor [k _ _] _ROLE-ATTRIBUTES
                            :if (and (is-not (get wanted k) None)
                                     (!= (get have k) (_flag (get wanted k))))
                            f"{k} → {(get wanted k)}"))
          (or (not wrong) (Drift f"role {role}: {(.join ", " wrong)}")))))

(defprop has-role :posix [#^ pg-name role
                          * #^ (optional boolean) [login None] #^ (optional boolean) [createdb None]
                          #^ (optional boolean) [createrole None]
                          #^ (optional boolean) [superuser None]
                          #^ (optional cluster) [cluster None]]
  "There is a role ROLE in the cluster, with LOGIN, CREATEDB, CREATEROLE
and SUPERUSER as given (True or False; an attribute not given is left as
it is, and a new role has PostgreSQL's defaults for it: no login, no
rights).  The server must be running.  Unapplying drops the role, which
PostgreSQL refuses while it owns anything."
  (:desc f"PostgreSQL role {role}")
  (:watch [(watch-poll POLL)])
  (:check (setv c (resolve-cluster cluster))
          (_role-drift (_role c role) {"login" login "createdb" createdb
                                       "createrole" createrole "superuser" superuser}
                       role))
  (:apply
    (setv c (resolve-cluster cluster)
          attributes (_attributes-sql {"login" login "createdb" createdb
                                       "createrole" createrole "superuser" superuser}))
    (psql c (+ (if (is (_role c role) None) "CREATE ROLE :\"role\"" "ALTER ROLE :\"role\"")
               (if attributes (+ " WITH " attributes) "") ";\n")
          :role role)
    None)
  (:unapply
    (setv c (resolve-cluster cluster))
    (if (is (_role c role) None)
        NO-CHANGE
        (do (psql c "DROP ROLE :\"role\";\n" :role role) None))))

;; Passwords.  PostgreSQL keeps a SCRAM-SHA-256 verifier (RFC 5803) of a
;; password: a salt, an iteration count and two keys derived from them and
;; the password.  consfig makes the verifier itself, as psql's \password
;; does, so only the verifier is sent; and whether a stored one is of the
;; password is found by deriving the keys again with its salt.

(defn _saslprep [password]
  ;; RFC 4013, as PostgreSQL and libpq apply it: ASCII as it is; a password
  ;; that would need a prohibited character is used unprepared.
  (when (.isascii password) (return password))
  (setv mapped (.join "" (gfor ch password :if (not (stringprep.in-table-b1 ch))
                               (if (stringprep.in-table-c12 ch) " " ch)))
        s (unicodedata.normalize "NFKC" mapped)
        prohibited [stringprep.in-table-c12 stringprep.in-table-c21-c22 stringprep.in-table-c3
                    stringprep.in-table-c4 stringprep.in-table-c5 stringprep.in-table-c6
                    stringprep.in-table-c7 stringprep.in-table-c8 stringprep.in-table-c9
                    stringprep.in-table-a1])
  (when (any (gfor ch s (any (gfor p prohibited (p ch)))))
    (return password))
  (when (any (gfor ch s (stringprep.in-table-d1 ch)))
    (when (or (any (gfor ch s (stringprep.in-table-d2 ch)))
              (not (stringprep.in-table-d1 (get s 0)))
              (not (stringprep.in-table-d1 (get s -1))))
      (return password)))
  s)

(defn _scram-keys [password salt iterations]
  (setv salted (hashlib.pbkdf2-hmac "sha256" (.encode (_saslprep password) "utf-8")
                                    salt iterations)
        client-key (.digest (hmac.new salted b"Client Key" "sha256")))
  #((.digest (hashlib.sha256 client-key)) (.digest (hmac.new salted b"Server Key" "sha256"))))

(defn _b64 [b] (.decode (base64.b64encode b) "ascii"))

(defn scram-verifier [password * [salt None] [iterations 4096]]
  "The SCRAM-SHA-256 verifier of PASSWORD that PostgreSQL stores, with SALT
(16 random bytes by default)."
  (setv salt (or salt (os.urandom 16))
        #(stored server) (_scram-keys password salt iterations))
  f"SCRAM-SHA-256${iterations}:{(_b64 salt)}${(_b64 stored)}:{(_b64 server)}")

(setv _VERIFIER (re.compile r"SCRAM-SHA-256\$([0-9]+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)"))

(defn password-matches? [stored password role]
  "Whether STORED, what pg_authid holds for ROLE (a SCRAM verifier, an MD5
hash, or nothing), is of PASSWORD."
  (setv m (and stored (.fullmatch _VERIFIER stored)))
  (cond m (let [#(stored-key server-key) (_scram-keys password (base64.b64decode (.group m 2))
                                                      (int (.group m 1)))]
            (and (hmac.compare-digest stored-key (base64.b64decode (.group m 3)))
                 (hmac.compare-digest server-key (base64.b64decode (.group m 4)))))
        (and stored (.startswith stored "md5"))
        (hmac.compare-digest stored
                             (+ "md5" (.hexdigest (hashlib.md5 (.encode (+ password role) "utf-8")))))
        True False))

(defn password-iden1 []
  "The first identifier of the passwords of the current host's PostgreSQL
roles: `--postgres-passwd--HOSTNAME`."
  (+ "--postgres-passwd--" (get-hostname)))

(defn _password-item [role iden1 iden2]
  #((or iden1 (password-iden1)) (or iden2 role)))

(defn _password [role iden1 iden2]
  (setv #(i1 i2) (_password-item role iden1 iden2)
        p (.reveal (get-data-string i1 i2)))
  (when (.endswith p "\n") (setv p (cut p -1)))
  (when (or (not p) (re.search "[\n\r\x00]" p))
    (raise (FailedChange (+ f"the data item ({i1} {i2}) is not a password: "
                            "it must be one line, not empty (its content is not shown)"))))
  p)

(defprop has-password :posix [#^ pg-name role
                              * #^ (optional non-empty-line) [iden1 None]
                              #^ (optional non-empty-line) [iden2 None]
                              #^ (optional cluster) [cluster None]]
  "ROLE's password is the one held as prerequisite data, a secret: the item
(`--postgres-passwd--HOSTNAME` ROLE), or (IDEN1 IDEN2) to share it with the
hosts that connect (`_app` \"db-password\").  It is one line.  consfig
makes a SCRAM-SHA-256 verifier of it and sets that (statement logging off
for the session), so the password never reaches the target, a command line
or a log; it is compared with what the server stores by deriving the
verifier again.  ROLE must exist (`has-role`), and the server be running."
  (:desc f"PostgreSQL role {role} has its password from data")
  (:watch [(watch-poll POLL)])
  (:hostattrs (require-data #* (_password-item role iden1 iden2) :secret True))
  (:check
    (setv c (resolve-cluster cluster)
          rows (_rows (psql c "SELECT coalesce(rolpassword, '') FROM pg_authid WHERE rolname = :'role';\n"
                            :role role)))
    (cond (not rows) (Drift f"role {role} does not exist")
          (password-matches? (get rows 0 0) (_password role iden1 iden2) role) True
          True (Drift f"role {role}'s password would be set")))
  (:apply
    (setv c (resolve-cluster cluster)
          verifier (scram-verifier (_password role iden1 iden2)))
    (when (not (.fullmatch _VERIFIER verifier))
      (raise (FailedChange "internal error: a SCRAM verifier of an unexpected form")))
    (psql c (+ "SET log_statement = 'none';\n"
               f"ALTER ROLE :\"role\" PASSWORD '{verifier}';\n")
          :role role)
    None))

;; Databases

(defn _database [cluster db]
  ;; {"owner" …, "encoding" …, "locale" …}, or None.
  (setv rows (_rows (psql cluster (+ "SELECT pg_get_userbyid(datdba), pg_encoding_to_char(encoding), "
                                     "datcollate FROM pg_database WHERE datname = :'db';\n")
                          :db db)))
  (when rows (dict (zip ["owner" "encoding" "locale"] (get rows 0)))))

(defn _same-encoding? [a b]
  (= (re.sub "[-_]" "" (.upper a)) (re.sub "[-_]" "" (.upper b))))

(defprop has-database :posix [#^ pg-name database
                              * #^ (optional pg-name) [owner None]
                              #^ (optional pg-encoding) [encoding None]
                              #^ (optional pg-locale) [locale None]
                              #^ (optional cluster) [cluster None]]
  "There is a database DATABASE in the cluster, owned by OWNER (a role that
must exist) when given.  A new database gets ENCODING and LOCALE when given
(from template0, as PostgreSQL needs for them), the cluster's otherwise.
An existing one with another owner is given to OWNER; one with another
encoding or locale is a failure, as PostgreSQL cannot change them (dump,
drop and create it again).  The server must be running.  Never unapplied:
that would drop its data.  The converging agent sees a database dropped at
once (it watches the cluster's `base/` directory), and other changes by a
poll."
  (:desc f"PostgreSQL database {database}")
  (:watch [(watch-poll POLL) #* (_databases-watch cluster)])
  (:check
    (setv have (_database (resolve-cluster cluster) database))
    (cond (is have None) (Drift f"database {database} would be created")
          (and owner (!= (get have "owner") owner))
          (Drift f"database {database}: owner {(get have "owner")} → {owner}")
          (and encoding (not (_same-encoding? (get have "encoding") encoding)))
          (Drift f"database {database} has encoding {(get have "encoding")}, not {encoding}")
          (and locale (!= (get have "locale") locale))
          (Drift f"database {database} has locale {(get have "locale")}, not {locale}")
          True True))
  (:apply
    (setv c (resolve-cluster cluster)
          have (_database c database)
          vars (dfor [k v] [["db" database] ["owner" owner] ["encoding" encoding] ["locale" locale]]
                     :if (is-not v None) k v))
    (when have
      (for [[k v] [["encoding" encoding] ["locale" locale]]]
        (when (and v (not (if (= k "encoding") (_same-encoding? (get have k) v) (= (get have k) v))))
          (raise (FailedChange (+ f"database {database} has {k} {(get have k)}, not {v}; "
                                  "PostgreSQL cannot change that: dump it, drop it and let "
                                  "this property create it again"))))))
    (psql c (if have
                "ALTER DATABASE :\"db\" OWNER TO :\"owner\";\n"
                (+ "CREATE DATABASE :\"db\""
                   (if owner " OWNER :\"owner\"" "")
                   (if encoding " ENCODING :'encoding'" "")
                   (if locale " LOCALE :'locale'" "")
                   (if (or encoding locale) " TEMPLATE template0" "")
                   ";\n"))
          #** vars)
    None))

;; pg_hba.conf

(defn hba-path [cluster]
  "The pg_hba.conf of CLUSTER (\"VERSION/NAME\")."
  (posixpath.join "/etc/postgresql" cluster "pg_hba.conf"))

(defn _fields [l] (.split (get (.split l "#" 1) 0)))

(defn _rule? [l] (bool (_fields l)))

(defn _postgres-rule? [l]
  ;; Debian's first rule, which lets the postgres user in by peer
  ;; authentication: consfig itself comes in through it.
  (= (cut (_fields l) 0 3) ["local" "all" "postgres"]))

(defn hba-text [old lines]
  "OLD, the text of a pg_hba.conf, with each of LINES that it lacks (its
fields compared, not its spacing) added where it takes effect: before every
other rule but the one that lets the postgres user in, which stays first."
  (setv have (.split old "\n")
        present (lfor l have :if (_rule? l) (_fields l))
        missing (lfor l (dict.fromkeys lines) :if (not-in (.split l) present) l))
  (when (not missing) (return old))
  (setv rules (lfor [i l] (enumerate have) :if (_rule? l) i)
        at (cond (and rules (_postgres-rule? (get have (get rules 0)))) (+ (get rules 0) 1)
                 rules (get rules 0)
                 True (len (if (and have (= (get have -1) "")) (cut have -1) have))))
  (.join "\n" (+ (cut have at) missing (cut have at None))))

(defn hba-without [old lines]
  "OLD without the rules of LINES (fields compared)."
  (setv unwanted (lfor l lines (.split l)))
  (.join "\n" (lfor l (.split old "\n") :if (or (not (_rule? l)) (not-in (_fields l) unwanted)) l)))

(defn _online? [cluster]
  (setv #(version name) (.split cluster "/")
        c (_find (clusters) version name))
  (and c (= (get c "status") "online")))

(defn _hba-changed [cluster path old new]
  ;; The new rules are in place.  A running server reads the file as it is
  ;; now in pg_hba_file_rules: a rule it cannot read puts the old file back
  ;; before anything reloads.  Then it reloads, where services may be touched.
  (when (_online? cluster)
    (setv errors (_rows (psql cluster (+ "SELECT line_number, error FROM pg_hba_file_rules "
                                         "WHERE error IS NOT NULL;\n"))))
    (when errors
      (update-file path old)
      (raise (FailedChange (+ f"{path} would be invalid; left unchanged:\n"
                              (.join "\n" (gfor [n e] errors f"line {n}: {e}"))))))
    (if (no-services?)
        (skip-for-no-services f"reloading cluster {cluster}")
        (psql cluster "SELECT pg_reload_conf();\n")))
  None)

(defn _edit-hba [cluster edit]
  (setv c (resolve-cluster cluster)
        path (hba-path c)
        old (read-text path))
  (when (is old None)
    (raise (FailedChange f"{path} does not exist")))
  (setv new (edit old))
  (cond (= new old) NO-CHANGE
        (checking?) (update-file path new)
        True (do (update-file path new)
                 (_hba-changed c path old new))))

(defprop hba-contains-lines :posix [#^ hba-line #* lines #^ (optional cluster) [cluster None]]
  "The cluster's pg_hba.conf has each of LINES, rules such as \"host app
app 10.0.0.0/8 scram-sha-256\" (fields compared, whatever their spacing).  A
rule it lacks goes before the other rules — the first that matches a
connection decides — but after Debian's `local all postgres peer`, which
consfig needs.  A running server checks the new file (pg_hba_file_rules)
before it reloads it; a rule it cannot read puts the old file back and
fails.  Check mode shows the diff.  Unapplying removes LINES."
  (:simulates True)
  (:desc f"pg_hba.conf contains {(.join " | " lines)}")
  (:watch (if cluster [(watch-path (hba-path cluster))] [(watch-poll POLL)]))
  (:apply (_edit-hba cluster (fn [old] (hba-text old lines))))
  (:unapply (_edit-hba cluster (fn [old] (hba-without old lines)))))

(export :objects [installed cluster-present has-role has-password has-database
                  hba-contains-lines clusters resolve-cluster psql scram-verifier
                  password-matches? password-iden1 hba-path hba-text hba-without])
