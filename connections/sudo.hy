"The `:sudo` hop: run scripts as another user (root by default) with sudo.

`:sudo`, `[:sudo :user \"postgres\"]`: sudo must let the upstream user run
commands as USER without a password (NOPASSWD), and `sudo -n` is used.

`[:sudo :from \"deploy@db1\"]`: USER may need a password, that of deploy on
db1.  It is the prerequisite data item (`--user-passwd--db1`, `deploy`),
from whichever data source has it (a `:pass` store, a `:pgp` file, …), or
else is asked for once on the controller's terminal, and kept for the rest
of the deployment.  After a `:python` hop it comes with the host's data
(consfig.nested.deploys carries it), never from the target's terminal.

How the password travels.  It must never be on a command line (`ps` shows
those to every user), in the environment (root can read it in /proc, and it
is inherited), in a file, or in any output.  So it goes where sudo -S reads
it: the first line of standard input, followed by a random marker line and
then the script's own input.  sudo reads its password one byte at a time,
so it takes exactly that first line and leaves the rest to the command.
The command is a small shell loop that reads and discards lines up to the
marker and then runs the script with what remains.  The marker is what
makes this safe whether or not sudo asked: when it did not (credentials it
had cached), the discarded line is the password, which thus never reaches
the script.

A streaming process (`start-process`, for a `:python` hop after this one)
gets the same treatment: the password line and the marker are written to
its standard input first, and the process is handed over with that input
still open, for the caller to write its own protocol to.  The password thus
goes down the same pipe or SSH channel as everything else the process reads,
and is consumed before anything the caller writes."

(import secrets
        shlex
        threading
        consfig.model.context [deployment-cache]
        consfig.data.items [DataItem lookup-data]
        consfig.data.sources [USER-PASSWORD ask-secret terminal?]
        consfig.errors [ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT]
        consfig.transport.hop [Connection Hop STRING PROBE-TIMEOUT Script])

(defn password-item [designator]
  "The prerequisite data item holding the password of DESIGNATOR
(\"user@host\"): (`--user-passwd--HOST`, USER)."
  (setv #(user _ host) (.rpartition designator "@"))
  (when (not (and user host))
    (raise (ConnectionFailed f"sudo :from takes \"user@host\", not {(hy.repr designator)}")))
  #(f"{USER-PASSWORD}{host}" user))

(defn _ask [designator where]
  ;; getpass would fall back to reading standard input, with a warning, when
  ;; there is no terminal; a deployment from cron must fail instead.
  (when (not (terminal?))
    (raise (ConnectionFailed (+ f"sudo needs the password of {designator}, no data source "
                                f"has it (item {(hy.repr (password-item designator))}) "
                                "and there is no terminal to ask for it on")
                             where)))
  (.reveal (ask-secret f"sudo password for {designator} ({where})")))

;; Hosts deployed at once ask beforehand (`ask-beforehand`); a deployment
;; nested in one of them may still ask while others run: one at a time.
(setv _asking (threading.Lock))

(defn sudo-password [designator where]
  "The password of DESIGNATOR (\"user@host\"): from the data sources, else
asked for on the terminal; once per deployment."
  (with [_asking]
    (_sudo-password designator where)))

(defn _sudo-password [designator where]
  (setv cache (deployment-cache)
        key #("sudo-password" designator))
  (when (not-in key cache)
    (setv item (lookup-data #* (password-item designator) :secret True)
          ;; A password kept in a file usually ends with a newline.
          password (if item
                       (.removesuffix (.decode (.reveal (.content item)) "utf-8") "\n")
                       (_ask designator where)))
    (when (in "\n" password)
      (raise (ConnectionFailed f"the sudo password of {designator} contains a newline, which sudo cannot read"
                               where)))
    (setv (get cache key) password))
  (get cache key))

(defn password-carried [designator]
  "The item holding DESIGNATOR's password, for a `:sudo` hop established on
a target after a `:python` hop: from the data sources, else asked for on
this terminal when the host's data is sent."
  (setv #(iden1 iden2) (password-item designator)
        item (lookup-data iden1 iden2 :secret True))
  (or item
      (DataItem iden1 iden2 "asked" :secret True
                :fetch (fn [] (.encode (sudo-password designator "before connecting") "utf-8"))
                :source "the prompt")))

(defn forget-sudo-password [designator]
  (.pop (deployment-cache) #("sudo-password" designator) None))

;; Reads standard input up to the marker line ($1), then runs the script ($2)
;; on what follows.  `read` takes a pipe one byte at a time, so not a byte
;; past the marker is lost.
(setv _SKIP-TO-MARKER
      "while IFS= read -r l; do [ \"$l\" = \"$1\" ] && exec /bin/sh -c \"$2\"; done; exit 125")

;; The same for a streaming process: reads up to the marker ($1), then
;; becomes the argv that follows it.
(setv _SKIP-TO-MARKER-EXEC
      "m=$1; shift; while IFS= read -r l; do [ \"$l\" = \"$m\" ] && exec \"$@\"; done; exit 125")

;; sudo says "command not found" with exit code 1; a shell's exec says 127,
;; which is what a missing program must look like (`Connection.start-process`).
(setv _EXEC "exec \"$@\"")

(defclass SudoConnection [Connection]
  "Scripts run as `sudo -H -u USER -- /bin/sh -c SCRIPT` on the upstream."
  (setv hop-name "sudo")

  (defn __init__ [self upstream user [password None] * [checked True]]
    (.__init__ (super) upstream)
    (setv self.user user
          self._password password
          ;; False: whether sudo lets us be USER has not been asked yet
          ;; (`establish-before-python`).
          self._checked checked))

  (defn _check [self]
    (when (not self._checked)
      (_refuse-unless-allowed self.upstream self.user (_sudo-state self.upstream self.user))
      (setv self._checked True)))

  (defn explain-start-failure [self]
    (self._check))

  (defn describe [self]
    (if (= self.user "root") "sudo" f"sudo:{self.user}"))

  (defn __repr__ [self] f"<SudoConnection {self.where}>")

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (self._check)
    (if (is self._password None)
        (.run-script self.upstream
                      (shlex.join ["sudo" "-n" "-H" "-u" self.user "--" "/bin/sh" "-c" script])
                      input timeout :limit limit)
        (do (setv marker (+ "consfig-" (secrets.token-hex 16)))
            (.run-script self.upstream
                          (shlex.join ["sudo" "-S" "-p" "" "-H" "-u" self.user "--"
                                       "/bin/sh" "-c" _SKIP-TO-MARKER "sh" marker script])
                          (+ (.encode f"{self._password}\n{marker}\n") (or input b""))
                          timeout :limit limit))))

  (defn start-process [self argv]
    (if (is self._password None)
        ;; Unchecked, `-k` makes it the check `establish` would have made:
        ;; no password, and no credentials sudo has cached either.
        (.start-process self.upstream
                        ["sudo" "-n" #* (if self._checked [] ["-k"]) "-H" "-u" self.user "--"
                         "/bin/sh" "-c" _EXEC "sh" #* argv])
        (do (setv marker (+ "consfig-" (secrets.token-hex 16))
                  process (.start-process self.upstream
                                          ["sudo" "-S" "-p" "" "-H" "-u" self.user "--"
                                           "/bin/sh" "-c" _SKIP-TO-MARKER-EXEC "sh" marker #* argv]))
            (try
              (.write process.stdin (.encode f"{self._password}\n{marker}\n"))
              (.flush process.stdin)
              (except [BaseException]
                (.kill process)
                (raise)))
            process))))

(defn _probe [upstream argv [input None]]
  (.run upstream argv :input input :check False :timeout PROBE-TIMEOUT))

(defn sudo-without-password? [upstream user]
  "Whether the upstream user may sudo to USER with no password at all.
`-k` ignores credentials sudo has cached, which would run out mid-deployment."
  (. (_probe upstream ["sudo" "-n" "-k" "-u" user "--" "/bin/sh" "-c" ":"]) ok?))

(defn _check-password [upstream user password designator]
  (setv r (_probe upstream ["sudo" "-S" "-k" "-p" "" "-u" user "--" "/bin/sh" "-c" ":"]
                  (.encode f"{password}\n")))
  (when (not r.ok?)
    (forget-sudo-password designator)
    (setv said (.strip (+ r.stderr r.stdout)))
    (raise (ConnectionFailed
             (if (or (in "incorrect password" said) (in "try again" said))
                 f"wrong sudo password for {designator} (sudo to {user} refused it)"
                 f"sudo to {user} failed: {(or said (+ "exit code " (str r.exit-code)))}")
             upstream.where))))

(setv _NO-SUDO 127)

(defn _sudo-state [upstream user]
  ;; Whether there is a sudo, and whether it lets us be USER without a
  ;; password: one round trip, which is most of what establishing costs.
  (setv r (_probe upstream (Script (+ f"command -v sudo >/dev/null 2>&1 || exit {_NO-SUDO}; "
                                      "exec sudo -n -k -u \"$1\" -- /bin/sh -c :")
                                   user)))
  (cond (= r.exit-code _NO-SUDO) "absent"
        r.ok? "no-password"
        True "password"))

(defn _refuse-unless-allowed [upstream user state]
  ;; What `establish` says when there is no sudo, or it wants a password
  ;; and the hop has no :from.
  (when (= state "absent")
    (raise (ConnectionFailed "there is no sudo here" upstream.where)))
  (when (= state "password")
    (setv r (_probe upstream ["sudo" "-n" "-u" user "--" "/bin/sh" "-c" ":"]))
    (raise (ConnectionFailed
             (+ f"sudo to {user} needs a password here: "
                (or (.strip r.stderr) "sudo -n refused")
                "\n  Give the hop :from \"user@host\" to say whose password, e.g. "
                "[:sudo :from \"deploy@db1\"], or allow NOPASSWD in sudoers.")
             upstream.where))))

(defn establish [upstream * [user "root"] [from_ None]]
  (setv state (_sudo-state upstream user))
  (cond
    (= state "no-password") (SudoConnection upstream user)
    from_ (do (when (= state "absent")
                (_refuse-unless-allowed upstream user state))
              (setv password (sudo-password from_ upstream.where))
              (_check-password upstream user password from_)
              (SudoConnection upstream user password))
    True (_refuse-unless-allowed upstream user state)))

(defn establish-before-python [upstream * [user "root"] [from_ None]]
  "Before a `:python` hop, without :from: no round trip now.  The target's
Python is started with `sudo -n -k`, which fails where the check would
have; the python hop then asks this connection why
(`explain-start-failure`), which makes the check and says what
`establish` would have said."
  (if from_
      (establish upstream :user user :from_ from_)
      (SudoConnection upstream user :checked False)))

(defn ask-beforehand [where * [user "root"] [from_ None]]
  "Get the password of the `:from` designator, if any, before several hosts
start (asking for it if no data source has it), so that it is asked
for once, on the main thread, whether or not each host's sudo will want it."
  (when from_
    (sudo-password from_ where)))

(defn carried-data [kwargs]
  "What a `[:sudo :from …]` hop established on a target needs sent: its password."
  (if (.get kwargs "from") [(password-carried (get kwargs "from"))] []))

(setv HOP (Hop "sudo" {"user" STRING "from" STRING} establish :ask-beforehand ask-beforehand
               :establish-before-python establish-before-python :carried-data carried-data
               :user-hop True))

(export :objects [SudoConnection HOP password-item password-carried sudo-password
                  forget-sudo-password sudo-without-password?])
