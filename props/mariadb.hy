"MariaDB on Debian: the server, databases, users and their grants.

  (use-props consfig.props [mariadb])
  (mariadb.installed)
  (mariadb.has-database \"app\")
  (mariadb.has-user \"app\" :host \"localhost\")          ; its password from data
  (mariadb.has-grant \"app\" \"app\" :select :insert :update :delete)

SQL runs with the `mariadb` client as the server's root, over its socket
(Debian's root logs in by unix_socket: the connection must be root), the
statements on standard input.  The names a consfig gives are checked where
they are written against strict patterns (letters, digits, _ and a few
more), so that quoting them with backquotes and single quotes is all they
need.  The properties change the running server; they do not start it.

A user's password comes from prerequisite data, a secret.  consfig turns it
into the server's mysql_native_password hash before anything is sent
(`IDENTIFIED BY PASSWORD '*…'`), so the password itself never reaches the
target's server, a command line, a log or the output; it is compared with
the stored hash by hashing it again.

What they manage lives in the server's own tables, not in files to watch:
the converging agent polls them (their :apply says whether they hold)."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import hashlib
        re
        consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.data.items [get-data-string require-data]
        consfig.errors [FailedChange]
        consfig.model.context [connection]
        consfig.model.host [get-hostname]
        consfig.model.watchspec [watch-path]
        consfig.props.file [read-text remove-files update-file]
        consfig.props.apt :as apt
        consfig.types *)

(setv db-name (matching "db-name" "a database name (letters, digits, _ and $, 1 to 64)"
                        r"[A-Za-z0-9_$]{1,64}")
      db-user (matching "db-user" "a user name (letters, digits, _ . and -, 1 to 80, not starting with - or .)"
                        r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}")
      db-host (matching "db-host" "a host a user connects from: localhost, a name, an address, % or a pattern with %"
                        r"[A-Za-z0-9_.%:][A-Za-z0-9_.%:/-]{0,254}")
      charset (matching "charset" "a character set such as utf8mb4" r"[a-z0-9_]{1,32}")
      collation (matching "collation" "a collation such as utf8mb4_unicode_ci" r"[a-z0-9_]{1,64}")
      privilege (enum "all" "select" "insert" "update" "delete" "create" "drop" "alter" "index"
                      "references" "create-temporary-tables" "lock-tables" "execute" "create-view"
                      "show-view" "create-routine" "alter-routine" "event" "trigger"))

(defproplist installed :posix []
  "MariaDB's server and client are installed (Debian's `mariadb-server`)."
  (:desc "MariaDB installed")
  (apt.installed "mariadb-server"))

(defn sql [statements]
  "Run STATEMENTS (text) with the `mariadb` client as root, on standard
input; their output, tab-separated rows, without column names."
  (setv r (run "mariadb" "--batch" "--skip-column-names"
               :input statements :check False :timeout 120))
  (when (= r.exit-code 127)
    (raise (FailedChange "the mariadb client is not there: install MariaDB first (mariadb.installed)")))
  (when (not r.ok?)
    (raise (FailedChange (+ "mariadb: " (.strip (+ r.stderr r.stdout))
                            (if (in "Can't connect" r.stderr)
                                " (is the server running? these properties do not start it)"
                                "")))))
  r.stdout)

(defn _rows [out]
  (lfor l (.splitlines out) (.split l "\t")))

(defn _account [user host] f"'{user}'@'{host}'")

;; Databases

(defn _database [name]
  (setv rows (_rows (sql (+ "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME "
                            f"FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{name}';\n"))))
  (when rows (get rows 0)))

(defn _has-database [name cs coll]
  (setv have (_database name)
        options (+ (if cs f" CHARACTER SET {cs}" "") (if coll f" COLLATE {coll}" "")))
  (cond (is have None)
        (if (checking?)
            (do (inform f"database {name} would be created") WOULD-CHANGE)
            (do (sql f"CREATE DATABASE `{name}`{options};\n") None))
        (or (and cs (!= (get have 0) cs)) (and coll (!= (get have 1) coll)))
        (if (checking?)
            (do (inform f"database {name}: {(get have 0)}/{(get have 1)} → {(or cs (get have 0))}/{(or coll (get have 1))}")
                WOULD-CHANGE)
            (do (sql f"ALTER DATABASE `{name}`{options};\n") None))
        True NO-CHANGE))

(defn _no-database [name]
  (cond (is (_database name) None) NO-CHANGE
        (checking?) (do (inform f"database {name} would be dropped, with everything in it") WOULD-CHANGE)
        True (do (sql f"DROP DATABASE `{name}`;\n") None)))

(defprop has-database :posix [#^ db-name name * #^ (optional charset) [charset None]
                              #^ (optional collation) [collation None]]
  "The database NAME exists, with CHARSET and COLLATION when given (an
existing one is altered to them).  Unapplying drops it, with its tables."
  (:desc f"MariaDB database {name}")
  (:simulates True)
  (:apply (_has-database name charset collation))
  (:unapply (_no-database name)))

;; Users

(defn native-password-hash [password]
  "PASSWORD as mysql_native_password stores it: `*` and the upper-case hex
SHA-1 of its SHA-1."
  (+ "*" (.upper (.hexdigest (hashlib.sha1 (.digest (hashlib.sha1 (.encode password "utf-8"))))))))

(defn password-iden1 []
  "The first identifier of the current host's MariaDB passwords:
`--mariadb-passwd--HOSTNAME` (the second is the user)."
  (+ "--mariadb-passwd--" (get-hostname)))

(defn _password-item [user iden1 iden2]
  #((or iden1 (password-iden1)) (or iden2 user)))

(defn _password [user iden1 iden2]
  (setv #(i1 i2) (_password-item user iden1 iden2)
        p (.reveal (get-data-string i1 i2)))
  (when (.endswith p "\n") (setv p (cut p 0 -1)))
  (when (or (not p) (re.search "[\n\r\x00]" p))
    (raise (FailedChange (+ f"the data item ({i1} {i2}) is not a password: "
                            "it must be one line, not empty (its content is not shown)"))))
  p)

(defn _stored-hash [user host]
  ;; None when there is no such user; else the hash mysql.user shows.
  (setv rows (_rows (sql (+ "SELECT authentication_string FROM mysql.user "
                            f"WHERE User = '{user}' AND Host = '{host}';\n"))))
  (when rows (if (get rows 0) (get (get rows 0) 0) "")))

(defn _has-user [user host iden1 iden2]
  (setv hashed (native-password-hash (_password user iden1 iden2))
        stored (_stored-hash user host)
        account (_account user host))
  (when (not (re.fullmatch r"\*[0-9A-F]{40}" hashed))
    (raise (FailedChange "internal error: a password hash of an unexpected form")))
  (cond (= stored hashed) NO-CHANGE
        (checking?) (do (inform (if (is stored None)
                                    f"user {account} would be created"
                                    f"user {account}'s password would be set"))
                        WOULD-CHANGE)
        (is stored None) (do (sql f"CREATE USER {account} IDENTIFIED BY PASSWORD '{hashed}';\n") None)
        True (do (sql f"ALTER USER {account} IDENTIFIED BY PASSWORD '{hashed}';\n") None)))

(defn _no-user [user host]
  (cond (is (_stored-hash user host) None) NO-CHANGE
        (checking?) (do (inform f"user {(_account user host)} would be dropped") WOULD-CHANGE)
        True (do (sql f"DROP USER {(_account user host)};\n") None)))

(defprop has-user :posix [#^ db-user user * #^ db-host [host "localhost"]
                          #^ (optional non-empty-line) [iden1 None]
                          #^ (optional non-empty-line) [iden2 None]]
  "The user USER@HOST exists with the password held as prerequisite data,
a secret: the item (`--mariadb-passwd--HOSTNAME` USER), or (IDEN1 IDEN2) to
share it with the hosts that connect.  It is one line.  What is sent is its
hash, never the password (see `consfig.props.mariadb`).  Unapplying drops
the user."
  (:desc f"MariaDB user {user}@{host} has its password from data")
  (:hostattrs (require-data #* (_password-item user iden1 iden2) :secret True))
  (:simulates True)
  (:apply (_has-user user host iden1 iden2))
  (:unapply (_no-user user host)))

;; Grants

(defn _privilege-sql [p] (.upper (.replace p.name "-" " ")))

(defn _granted [user host db]
  ;; The privileges USER@HOST has on DB.*, upper case (ALL PRIVILEGES as
  ;; itself), from SHOW GRANTS.
  (when (is (_stored-hash user host) None)
    (raise (FailedChange f"there is no user {(_account user host)} to grant to: (mariadb.has-user …) first")))
  (setv out #{})
  (for [[line] (_rows (sql f"SHOW GRANTS FOR {(_account user host)};\n"))]
    (setv m (re.match (+ r"GRANT (.+) ON `" (re.escape db) r"`\.\* TO ") line))
    (when m
      (.update out (gfor p (.split (.group m 1) ",") (.strip p)))))
  out)

(defn _wanted [privileges]
  (if (in "all" (gfor p privileges p.name))
      #{"ALL PRIVILEGES"}
      (set (map _privilege-sql privileges))))

(defn _has-grant [db user host privileges]
  (setv have (_granted user host db)
        missing (- (_wanted privileges) have))
  (cond (not missing) NO-CHANGE
        (checking?) (do (inform (+ f"{(.join ", " (sorted missing))} on {db}.* would be granted to "
                                   (_account user host)))
                        WOULD-CHANGE)
        True (do (sql f"GRANT {(.join ", " (sorted missing))} ON `{db}`.* TO {(_account user host)};\n")
                 None)))

(defn _no-grant [db user host privileges]
  (when (is (_stored-hash user host) None) (return NO-CHANGE))
  (setv held (& (_wanted privileges) (_granted user host db)))
  (cond (not held) NO-CHANGE
        (checking?) (do (inform f"{(.join ", " (sorted held))} on {db}.* would be revoked") WOULD-CHANGE)
        True (do (sql f"REVOKE {(.join ", " (sorted held))} ON `{db}`.* FROM {(_account user host)};\n")
                 None)))

(defprop has-grant :posix [#^ db-name db #^ db-user user #^ privilege #* privileges
                           #^ db-host [host "localhost"]]
  "USER@HOST has PRIVILEGES (`:select`, `:insert`, … `:all`) on every table
of the database DB: `(mariadb.has-grant \"app\" \"app\" :select :insert)`.
Privileges it has besides are left alone.  The user must exist
(`has-user`).  Unapplying revokes them."
  (:invariant privileges "needs at least one privilege (:all for all of them)")
  (:desc f"MariaDB {user}@{host} may {(.join ", " (gfor p privileges p.name))} on {db}")
  (:simulates True)
  (:apply (_has-grant db user host privileges))
  (:unapply (_no-grant db user host privileges)))

(setv SERVER-CNF "/etc/mysql/mariadb.conf.d/90-consfig.cnf"
      option-name (matching "option-name" "a server option name (lower-case letters, digits, _ and -)"
                            r"[a-z][a-z0-9_-]{0,63}")
      option-value (matching "option-value" "an option value on one line, no leading or trailing whitespace"
                             r"[^\s\x00](?:[^\n\r\x00]*[^\s\x00])?"))

(defn server-cnf-text [settings]
  "The option file consfig writes for SETTINGS (a dict, name → value)."
  (+ "# Written by consfig.\n[mysqld]\n"
     (.join "" (gfor [k v] (sorted (.items settings)) f"{k} = {v}\n"))))

(defn _server-settings [settings]
  (setv text (server-cnf-text settings))
  (when (= (read-text SERVER-CNF) text) (return NO-CHANGE))
  ;; The server reads the new file beside the others before it is put in
  ;; place: an option it does not know is refused now, not at its restart.
  (setv tmp (.strip (. (run "mktemp" :timeout 30) stdout)))
  (try
    (.write-file (connection) tmp (.encode text "utf-8") :mode 0o644)
    (setv r (run "mariadbd" f"--defaults-extra-file={tmp}" "--help" "--verbose"
                 :check False :timeout 120))
    (when (not r.ok?)
      (raise (FailedChange (+ "mariadbd refuses these settings; nothing was written:\n"
                              (.replace (or (.strip r.stderr) (cut (.strip r.stdout) -2000 None))
                                        tmp SERVER-CNF)))))
    (finally (run "rm" "-f" "--" tmp :check False :timeout 30)))
  (setv result (update-file SERVER-CNF text :mode 0o644))
  (when (and (= result None) (not (checking?)))
    (inform "the server reads them when it next starts: restart it (systemd.restarted \"mariadb\")"))
  result)

(defprop has-server-settings :posix [#^ (dict-of option-name option-value) settings]
  "The server's options are SETTINGS (a dict: `{\"bind-address\" \"127.0.0.1\"
\"max_connections\" \"200\"}`), in the [mysqld] section of
/etc/mysql/mariadb.conf.d/90-consfig.cnf, which holds nothing else.  The
server checks them first (`mariadbd --help --verbose` with the new file):
an option it does not know is refused and nothing written.  They take
effect when it restarts (put a restart in an `on-change`).  Unapplying
removes the file."
  (:invariant settings "needs at least one setting")
  (:desc f"MariaDB server: {(.join ", " (gfor [k v] (.items settings) f"{k} = {v}"))}")
  (:watch [(watch-path SERVER-CNF)])
  (:simulates True)
  (:apply (_server-settings settings))
  (:unapply (remove-files SERVER-CNF)))

(export :objects [installed has-database has-user has-grant has-server-settings sql native-password-hash
                  password-iden1])
