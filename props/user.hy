"Users and groups, through the shadow utilities (useradd, usermod, …)."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import datetime
        re
        consfig.apply.actions [NO-CHANGE Script run run-ok? output]
        consfig.data.items [get-data-string require-data]
        consfig.apply.engine [Drift]
        consfig.model.host [get-hostname]
        consfig.errors [FailedChange]
        consfig.props.file [add-lines]
        consfig.types *)

(setv ACCOUNT-WATCHES [(watch-path "/etc/passwd") (watch-path "/etc/group")
                       (watch-path "/etc/shadow") (watch-path "/etc/gshadow")])

(setv groups (one-of group-name (list-of group-name))
      login-shell (matching "login-shell" "an absolute path on one line" r"/[^\n\r\x00]*"))

(defn passwd-entry [username]
  "USERNAME's passwd(5) fields as a dict, or None when there is no such user."
  (setv r (run "getent" "passwd" "--" username :check False :timeout 60))
  (when r.ok?
    (dict (zip ["name" "password" "uid" "gid" "gecos" "home" "shell"]
               (.split (.rstrip (get (.splitlines r.stdout) 0) "\n") ":")))))

(defn home-directory [username]
  "USERNAME's home directory; a failure when there is no such user."
  (setv e (passwd-entry username))
  (when (not e)
    (raise (FailedChange f"there is no user {username}")))
  (get e "home"))

(defn as-user [user argv]
  "A command that runs ARGV as USER: directly when the connection is USER
already, else through runuser(1), which needs root and sets HOME, USER and
LOGNAME to USER's (the rest of the environment stays)."
  (Script (+ "u=$1; shift\n"
             "if [ \"$(id -un)\" = \"$u\" ]; then exec \"$@\"; fi\n"
             "exec runuser -u \"$u\" -- \"$@\"")
          user #* argv))

(defn _group-exists? [name]
  (run-ok? "getent" "group" "--" name :timeout 60))

(defn _password-status [username]
  ;; passwd -S: NAME STATUS …, STATUS being L (locked), NP (no password) or
  ;; P (usable password).
  (get (.split (output "passwd" "-S" "--" username :timeout 60)) 1))

(defprop has-account :posix [#^ user-name username]
  "There is a user account USERNAME (made with a home directory and the
system's defaults).  Unapplying deletes the account but keeps its home
directory and files."
  (:watch ACCOUNT-WATCHES)
  (:desc f"Account for {username}")
  (:check (or (bool (passwd-entry username))
              (Drift f"account {username} would be created")))
  (:apply (run "useradd" "-m" "--" username :timeout 120))
  (:unapply (run "userdel" "--" username :timeout 120)))

(defprop has-account-with-uid :posix [#^ user-name username #^ id-number uid]
  "There is a user account USERNAME with user id UID.  An account with
another id gets UID (and its home directory's files are chowned to it)."
  (:watch ACCOUNT-WATCHES)
  (:desc f"Account for {username} with uid {uid}")
  (:check (setv have (.get (or (passwd-entry username) {}) "uid"))
          (or (= have (str uid))
              (Drift (if have
                         f"{username}: uid {have} → {uid}"
                         f"account {username} would be created with uid {uid}"))))
  (:apply
    (if (passwd-entry username)
        (run "usermod" "-u" (str uid) "--" username :timeout 300)
        (run "useradd" "-m" "-u" (str uid) "--" username :timeout 120))))

(defprop group-exists :posix [#^ group-name name * #^ id-number [gid None]]
  "There is a group NAME (with group id GID, when given, for a new group).
Unapplying deletes it."
  (:watch ACCOUNT-WATCHES)
  (:desc f"Group {name} exists")
  (:check (or (_group-exists? name) (Drift f"group {name} would be created")))
  (:apply (run "groupadd" #* (if (is gid None) [] ["-g" (str gid)]) "--" name :timeout 120))
  (:unapply (run "groupdel" "--" name :timeout 120)))

(defn _groups-of [username]
  (set (.split (output "id" "-nG" "--" username :timeout 60))))

(defn _flatten [xs]
  (setv out [])
  (for [x xs]
    (if (isinstance x #(list tuple)) (.extend out (_flatten x)) (.append out (str x))))
  out)

(defprop has-groups :posix [#^ user-name username #^ groups #* groups]
  "USERNAME is a member of each of GROUPS (and perhaps of others).
Unapplying takes USERNAME out of GROUPS."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} in groups {(.join " " (_flatten groups))}")
  (:preprocess [username #* (_flatten groups)])
  (:check (setv missing (- (set groups) (_groups-of username)))
          (or (not missing)
              (Drift f"{username} would join {(.join " " (sorted missing))}")))
  (:apply (run "usermod" "-a" "-G" (.join "," groups) "--" username :timeout 120))
  (:unapply
    (setv have (_groups-of username))
    (for [g groups :if (in g have)]
      (run "gpasswd" "-d" username g :timeout 60))))

(defn group-members [name]
  "The supplementary members of the group NAME (its fourth field in
/etc/group, or what NSS says); a failure when there is no such group."
  (setv r (run "getent" "group" "--" name :check False :timeout 60))
  (when (not r.ok?)
    (raise (FailedChange f"there is no group {name}: (user.group-exists {(hy.repr name)}) first")))
  (setv members (get (.split (.rstrip (get (.splitlines r.stdout) 0) "\n") ":") 3))
  (if members (.split members ",") []))

(defn _membership-drift [group have users exactly]
  (setv join (lfor u users :if (not-in u have) u)
        leave (if exactly (lfor u have :if (not-in u users) u) []))
  (or (not (or join leave))
      (Drift (.join "; " (+ (if join [f"{(.join " " join)} would join {group}"] [])
                            (if leave [f"{(.join " " leave)} would leave {group}"] []))))))

(defprop group-has-members :posix [#^ group-name group #^ (one-of user-name (list-of user-name)) #* users
                                   #^ boolean [exactly False]]
  "Each of USERS is a member of GROUP (a supplementary member, as
/etc/group lists them); with EXACTLY, they are its only members (none, when
USERS is empty).  A user's primary group is not counted.  Unapplying takes
USERS out of GROUP.

  (user.group-has-members \"adm\" \"alice\" \"bob\")"
  (:watch ACCOUNT-WATCHES)
  (:desc (+ f"group {group} has members {(.join " " (_flatten users))}"
            (if exactly " only" "")))
  (:preprocess [group #* (_flatten users) :exactly exactly])
  (:invariant (or users exactly) "needs at least one user (or :exactly True, for no members)")
  (:check (if (_group-exists? group)
              (_membership-drift group (group-members group) users exactly)
              (Drift f"there is no group {group} (yet)")))
  (:apply
    (setv have (group-members group))
    (if exactly
        (run "gpasswd" "-M" (.join "," users) group :timeout 60)
        (for [u users :if (not-in u have)]
          (run "gpasswd" "-a" u group :timeout 60))))
  (:unapply
    (setv have (group-members group))
    (for [u users :if (in u have)]
      (run "gpasswd" "-d" u group :timeout 60))))

(defprop has-login-shell :posix [#^ user-name username #^ login-shell shell]
  "USERNAME's login shell is SHELL, which is listed in /etc/shells."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} has login shell {shell}")
  (:check (setv have (.get (or (passwd-entry username) {}) "shell"))
          (or (= have shell) (Drift f"{username}: login shell {have} → {shell}")))
  (:apply
    (add-lines "/etc/shells" [shell])
    (run "usermod" "-s" shell "--" username :timeout 120)))

(defprop has-locked-password :posix [#^ user-name username]
  "USERNAME's password is locked: no one logs in as USERNAME with a
password (SSH keys still work)."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} has a locked password")
  (:check (or (= (_password-status username) "L")
              (Drift f"{username}'s password would be locked")))
  (:apply (run "passwd" "-l" "--" username :timeout 60)))

(defprop has-enabled-password :posix [#^ user-name username
                                        * #^ (secret non-empty-line) [initial-password None]]
  "USERNAME can log in with a password: a locked one is unlocked, and an
account with none gets INITIAL-PASSWORD (given to chpasswd on its standard
input, never on a command line), for the user to change.  A password the user
has set is left alone."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} has an enabled password")
  (:check (or (= (_password-status username) "P")
              (Drift f"{username}'s password would be enabled")))
  (:apply
    (setv status (_password-status username))
    (when (= status "L")
      ;; Unlocking an account that never had a password would leave it with
      ;; none; passwd refuses, and we go on to set the initial one.
      (when (run-ok? "passwd" "-u" "--" username :timeout 60)
        (setv status (_password-status username))))
    (when (!= status "P")
      (when (is initial-password None)
        (raise (FailedChange f"{username} has no password to enable; give :initial-password")))
      (run "chpasswd" :input f"{username}:{initial-password}\n" :timeout 60))))

(defn password-iden1 []
  "The first identifier of the hashed passwords of the current host's users:
`--user-passwd--HOSTNAME`."
  (+ "--user-passwd--" (get-hostname)))

(defn _password-hash [username]
  ;; The hash as it goes into /etc/shadow: one field of one line.
  (setv h (.strip (.reveal (get-data-string (password-iden1) username))))
  (when (not (re.fullmatch r"[^:\s]+" h))
    (raise (FailedChange (+ f"the data item ({(password-iden1)} {username}) is not a hashed "
                            "password (one line, no ':'; make one with mkpasswd)"))))
  h)

(defprop has-password :posix [#^ user-name username]
  "USERNAME's password is the hashed password (crypt(3), as `mkpasswd -m
yescrypt` makes it) held as prerequisite data (`--user-passwd--HOSTNAME`
USERNAME), a secret.  It is compared with /etc/shadow on the target and set
with `chpasswd -e`, the hash on standard input, never on a command line."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} has its password from data")
  (:hostattrs (require-data (password-iden1) username :secret True))
  (:check
    (or (run-ok? (Script "test \"$(getent shadow -- \"$1\" | cut -d: -f2)\" = \"$(cat)\"" username)
                 :input (_password-hash username) :timeout 60)
        (Drift f"{username}'s password would be set")))
  (:apply (run "chpasswd" "-e" :input f"{username}:{(_password-hash username)}\n" :timeout 60)))

(setv full-name (matching "full-name" "a full name (one line, no : , or =)" r"[^:,=\n\r\x00]*"))

(defprop has-system-account :posix [#^ user-name username * #^ abs-path [home "/nonexistent"]
                                    #^ login-shell [shell "/usr/sbin/nologin"]]
  "There is a system account USERNAME, for a daemon rather than a person: a
uid below 1000, a group of the same name, HOME (not created: by default
/nonexistent, as Debian's own daemons have) and SHELL (by default none to
log in with).  An ordinary account of that name is a failure.  Unapplying
deletes the account."
  (:watch ACCOUNT-WATCHES)
  (:desc f"System account for {username}")
  (:check (or (bool (passwd-entry username))
              (Drift f"system account {username} would be created")))
  (:apply (run "useradd" "--system" "--user-group" "--home-dir" home "--shell" shell
               "--" username :timeout 120))
  (:unapply (run "userdel" "--" username :timeout 120)))

(defn _full-name [username]
  (get (.split (get (or (passwd-entry username) {"gecos" ""}) "gecos") ",") 0))

(defprop has-full-name :posix [#^ user-name username #^ full-name name]
  "USERNAME's full name (the first field of the GECOS field of passwd(5))
is NAME; the other fields (room, telephone numbers) are left as they are."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username}'s full name is {name}")
  (:check (setv have (_full-name username))
          (or (= have name) (Drift f"{username}: full name {have} → {name}")))
  (:apply (run "chfn" "-f" name "--" username :timeout 60)))

(defn _gid-of [group]
  (setv r (run "getent" "group" "--" group :check False :timeout 60))
  (when (not r.ok?)
    (raise (FailedChange f"there is no group {group}: (user.group-exists {(hy.repr group)}) first")))
  (get (.split (get (.splitlines r.stdout) 0) ":") 2))

(defprop has-primary-group :posix [#^ user-name username #^ group-name group]
  "USERNAME's primary group, which owns the files USERNAME makes, is GROUP
(`usermod -g`; files in USERNAME's home directory follow)."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username}'s primary group is {group}")
  (:check (setv have (.get (or (passwd-entry username) {}) "gid"))
          (or (= have (_gid-of group)) (Drift f"{username}: primary group {have} → {group}")))
  (:apply (run "usermod" "-g" group "--" username :timeout 300)))

(defprop has-home-directory :posix [#^ user-name username #^ abs-path home]
  "USERNAME's home directory is HOME.  The old home directory's contents
move there (`usermod -m`) when HOME does not exist yet; an existing HOME is
taken as it is, and the old one left."
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username}'s home is {home}")
  (:check (setv have (.get (or (passwd-entry username) {}) "home"))
          (or (= have home) (Drift f"{username}: home {have} → {home}")))
  (:apply (run "usermod" "-d" home #* (if (run-ok? "test" "-e" home) [] ["-m"]) "--" username
               :timeout 600)))

(defprop lacks-account :posix [#^ user-name username * #^ boolean [remove-home False]]
  "There is no user account USERNAME; with REMOVE-HOME, its home directory
and mail spool go with it (`userdel -r`), else they stay.  A user with
processes running is a failure, from userdel."
  (:watch ACCOUNT-WATCHES)
  (:desc f"No account for {username}")
  (:check (or (not (passwd-entry username))
              (Drift f"account {username} would be deleted")))
  (:apply (run "userdel" #* (if remove-home ["-r"] []) "--" username :timeout 120)))

(defprop lacks-group :posix [#^ group-name name]
  "There is no group NAME.  groupdel refuses to delete the primary group of
an account: that is a failure naming it.  Nothing to unapply: the group's
id and members are gone (`group-exists` makes one)."
  (:watch ACCOUNT-WATCHES)
  (:desc f"No group {name}")
  (:check (or (not (_group-exists? name)) (Drift f"group {name} would be deleted")))
  (:apply (run "groupdel" "--" name :timeout 120)))

(defn _member-of [username group]
  ;; Whether USERNAME is a supplementary member of GROUP (which may not exist).
  (setv r (run "getent" "group" "--" group :check False :timeout 60))
  (and r.ok?
       (in username (.split (get (.split (.rstrip (get (.splitlines r.stdout) 0) "\n") ":") 3) ","))))

(defprop not-in-groups :posix [#^ user-name username #^ groups #* groups]
  "USERNAME is a member of none of GROUPS (a group that does not exist
counts as one it is not in): taken out of sudo, adm, docker… when a site
says so.  A primary group is not a membership this removes.  Unapplying
puts USERNAME back in those GROUPS that exist.

  (user.not-in-groups \"alice\" \"sudo\" \"adm\")"
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username} in none of {(.join " " (_flatten groups))}")
  (:preprocess [username #* (_flatten groups)])
  (:check (setv member (lfor g groups :if (_member-of username g) g))
          (or (not member) (Drift f"{username} would leave {(.join " " member)}")))
  (:apply (for [g groups :if (_member-of username g)]
            (run "gpasswd" "-d" username g :timeout 60)))
  (:unapply
    (setv back (lfor g groups :if (and (_group-exists? g) (not (_member-of username g))) g))
    (for [g back]
      (run "gpasswd" "-a" username g :timeout 60))))

(setv _AGING [["min-days" "-m" 3] ["max-days" "-M" 4] ["warn-days" "-W" 5] ["inactive-days" "-I" 6]])

(defn _shadow-fields [username]
  (setv r (run "getent" "shadow" "--" username :check False :timeout 60))
  (when (not r.ok?)
    (raise (FailedChange f"there is no user {username} (or no shadow entry for it): (user.has-account {(hy.repr username)}) first")))
  (.split (.rstrip (get (.splitlines r.stdout) 0) "\n") ":"))

(defn _aging-drift [username wanted]
  ;; WANTED: [[name flag field value] …] of the settings given.
  (setv fields (_shadow-fields username)
        wrong (lfor [n _ i v] wanted :if (!= (get fields i) (str v))
                    f"{n} {(or (get fields i) "unset")} → {v}"))
  (or (not wrong) (Drift f"{username}: {(.join ", " wrong)}")))

(defprop has-password-aging :posix [#^ user-name username
                                    * #^ (optional (int-range 0 99999)) [min-days None]
                                    #^ (optional (int-range 0 99999)) [max-days None]
                                    #^ (optional (int-range 0 99999)) [warn-days None]
                                    #^ (optional (int-range 0 99999)) [inactive-days None]]
  "USERNAME's password ages as said (chage(1), the fields of shadow(5)):
MIN-DAYS between changes, MAX-DAYS before it must be changed, WARN-DAYS of
warning before, INACTIVE-DAYS after it expired before the account is locked.
What is not given is left as it is.  Nothing to unapply: the values it
replaced are not kept.

  (user.has-password-aging \"alice\" :max-days 90 :warn-days 14)"
  (:watch ACCOUNT-WATCHES)
  (:invariant (not (all (gfor x [min-days max-days warn-days inactive-days] (is x None))))
              "give at least one of :min-days :max-days :warn-days :inactive-days")
  (:desc (+ f"{username}'s password aging: "
            (.join ", " (gfor [[n _ _] v] (zip _AGING [min-days max-days warn-days inactive-days])
                              :if (is-not v None) f"{n} {v}"))))
  (:check (_aging-drift username (lfor [[n f i] v] (zip _AGING [min-days max-days warn-days inactive-days])
                                       :if (is-not v None) [n f i v])))
  (:apply (run "chage" #* (lfor [[_ f _] v] (zip _AGING [min-days max-days warn-days inactive-days])
                                :if (is-not v None) x [f (str v)] x)
               "--" username :timeout 60)))

(setv expiry-date (predicate "expiry-date"
                             "a date as YYYY-MM-DD (a real one, from 1970-01-02), or \"never\""
                             (fn [v] (and (isinstance v str)
                                          (or (= v "never")
                                              (and (re.fullmatch r"\d{4}-\d{2}-\d{2}" v)
                                                   (try (> (. (datetime.date.fromisoformat v) year) 1969)
                                                        (except [ValueError] False))
                                                   (!= v "1970-01-01")))))))

(defn _expiry-days [date]
  ;; shadow(5)'s eighth field for DATE: days since 1970-01-01, or "".
  (if (= date "never")
      ""
      (str (. (- (datetime.date.fromisoformat date) (datetime.date 1970 1 1)) days))))

(defn _shown-expiry [field]
  (if field
      (.isoformat (+ (datetime.date 1970 1 1) (datetime.timedelta :days (int field))))
      "never"))

(defprop account-expires :posix [#^ user-name username #^ expiry-date date]
  "USERNAME's account expires at the start of DATE (YYYY-MM-DD: it can no
longer log in from that day), or \"never\" (`chage -E`): the end of a
contractor's access, written down with the account.  Nothing to unapply:
the date it replaced is not kept.

  (user.account-expires \"contractor\" \"2027-03-31\")"
  (:watch ACCOUNT-WATCHES)
  (:desc f"{username}'s account expires {date}")
  (:check (setv have (get (_shadow-fields username) 7))
          (or (= have (_expiry-days date))
              (Drift f"{username}: expires {(_shown-expiry have)} → {date}")))
  (:apply (run "chage" "-E" (if (= date "never") "-1" date) "--" username :timeout 60)))

(setv SHELLS "/etc/shells")

(defn _shell-listed? [shell]
  (run-ok? "grep" "-qxF" "--" shell SHELLS :timeout 60))

(defprop login-shell-listed :posix [#^ login-shell shell]
  "SHELL is listed in /etc/shells, as a valid login shell (chsh(1) and
some daemons refuse one that is not), with Debian's add-shell(8).
Unapplying takes it out with remove-shell(8).

  (user.login-shell-listed \"/usr/local/bin/fish\")"
  (:watch [(watch-path SHELLS)])
  (:desc f"{shell} listed in /etc/shells")
  (:check (or (_shell-listed? shell) (Drift f"{shell} would be added to /etc/shells")))
  (:apply (run "add-shell" shell :timeout 60))
  (:unapply (if (_shell-listed? shell) (run "remove-shell" shell :timeout 60) NO-CHANGE)))

(export :objects [has-password password-iden1
                  lacks-group not-in-groups has-password-aging account-expires login-shell-listed SHELLS
                  has-account has-account-with-uid group-exists has-groups
                  group-has-members group-members
                  has-login-shell has-locked-password has-enabled-password
                  passwd-entry home-directory as-user
                  has-system-account has-full-name has-primary-group has-home-directory
                  lacks-account])
