"The `:ssh` hop: run scripts on another machine over one SSH connection.

`[:ssh :host \"db1\" :user \"deploy\"]` opens one SSH connection, a
`fabric.Connection`, when the chain is established and runs every script of
the deployment on its own channel of the paramiko transport it opens.  The
host defaults to the hostname of the host being deployed.  Fabric works out
where and as whom to connect, as ssh(1) would: the hop's arguments,
`user@host:port`, then `~/.ssh/config` (or the file `:config` names) with its
HostName, Port, User, IdentityFile, ProxyJump, ProxyCommand, ConnectTimeout
and `Match exec`.  consfig adds what Fabric leaves out: known_hosts and
StrictHostKeyChecking, IdentitiesOnly, ServerAliveInterval/CountMax, and
timeouts on every wait.

An `:ssh` hop after another one connects through it (Fabric's gateway, a
`direct-tcpip` channel, as `ssh -J` does):
`[[:ssh :host \"bastion\"] [:ssh :host \"db1\"]]`.  `connect-over` turns a
`fabric.Connection` a user already has into the same kind of hop (the
`:fabric` hop)."

(import os
        os.path
        select
        shlex
        socket
        threading
        time
        consfig.errors [ChainError CommandTimedOut ConnectionFailed]
        consfig.transport.frames [OUTPUT-LIMIT OutputBuffer]
        consfig.transport.hop [Connection Hop PORT SECONDS STRING STRINGS choice-of]
        consfig.model.host [get-hostname]
        consfig.util [bytes->text]
        logging)

(setv DEFAULT-CONNECT-TIMEOUT 30
      DEFAULT-ALIVE-INTERVAL 15
      DEFAULT-ALIVE-COUNT 3)

;; The script runs in a child shell whose death by a signal its parent sees
;; and turns into an exit code (128 + N): sshd would report it as an
;; exit-signal, which paramiko ignores, leaving only "exit code -1".
(setv _REPORT-SIGNAL "/bin/sh -c \"$1\"; exit $?")

(setv fabric None
      paramiko None
      _UnknownHostKey None
      _HostKeyPolicy None)

(defn _import-ssh-libraries []
  ;; Fabric, paramiko and invoke take a tenth of a second or more to
  ;; import: a chain is parsed and checked without them, and only a
  ;; deployment that connects over :ssh pays for them.
  (global fabric paramiko _UnknownHostKey _HostKeyPolicy)
  (when (is fabric None)
    (import fabric :as fab
            paramiko :as pm)  ; lazy: the controller's
    (setv #(_UnknownHostKey _HostKeyPolicy) (_host-key-classes pm)
          paramiko pm
          fabric fab)
    ;; A dropped connection is reported in consfig's words, where it
    ;; matters; without a handler of its own, paramiko's log would reach
    ;; Python's last resort and print "Socket exception: …" whenever it
    ;; happens (an idle connection the REPL keeps, dying).
    (.addHandler (logging.getLogger "paramiko") (logging.NullHandler))))

(defn _host-key-classes [paramiko]
  (defclass _UnknownHostKey [paramiko.SSHException]
    (defn __init__ [self hostname key]
      (.__init__ (super) hostname)
      (setv self.hostname hostname
            self.key key)))

  (defclass _HostKeyPolicy [paramiko.MissingHostKeyPolicy]
    "What to do with a host key that is not in known_hosts, as
StrictHostKeyChecking says: refuse it (yes), add it (accept-new) or use it
this once (no).  A key that differs from the known one is always refused —
paramiko does that before asking a policy."
    (defn __init__ [self mode known-hosts-file]
      (setv self.mode mode
            self.known-hosts-file known-hosts-file))
    (defn missing-host-key [self client hostname key]
      (cond
        (= self.mode "no") None
        (and (= self.mode "accept-new") self.known-hosts-file)
        (do (os.makedirs (os.path.dirname self.known-hosts-file) :mode 0o700 :exist-ok True)
            (with [f (open self.known-hosts-file "a")]
              (.write f (.to-line (paramiko.hostkeys.HostKeyEntry [hostname] key)))))
        True (raise (_UnknownHostKey hostname key)))))
  #(_UnknownHostKey _HostKeyPolicy))

(defn _strictness [hop-value ssh-config]
  (setv v (if (is hop-value None)
              (.get ssh-config "stricthostkeychecking" "yes")
              hop-value))
  (cond (is v True) "yes"
        (is v False) "no"
        (in (.lower (str v)) ["no" "off" "false"]) "no"
        (= (.lower (str v)) "accept-new") "accept-new"
        ;; `ask` would need a terminal we may not have: treat it as `yes`.
        True "yes"))

(defclass SSHConnection [Connection]
  "Scripts run on their own channel of one SSH connection, as
`exec /bin/sh -c SCRIPT` whatever the user's login shell."
  (setv hop-name "ssh")

  (defn __init__ [self upstream fabric-connection alias * [owned None]
                  [command-timeout None] [alive-interval DEFAULT-ALIVE-INTERVAL]
                  [alive-count DEFAULT-ALIVE-COUNT] [channel-timeout DEFAULT-CONNECT-TIMEOUT]]
    (.__init__ (super) upstream)
    ;; OWNED: the fabric Connections this hop opened and closes, its
    ;; ProxyJump gateways and FABRIC-CONNECTION itself; not one it was given.
    (setv self.fabric fabric-connection
          self.transport fabric-connection.transport
          self.alias alias
          self.owned (or owned [])
          self.command-timeout command-timeout
          self.alive-interval alive-interval
          self.alive-count alive-count
          self.channel-timeout channel-timeout
          self._probe None
          self._last-alive (time.monotonic)))

  (defn describe [self] f"ssh:{self.fabric.user}@{self.alias}")

  (defn alive? [self]
    ;; paramiko's keepalive finds a dead connection.
    (bool (and self.transport (.is-active self.transport))))

  (defn _lost [self [why None]]
    (ConnectionFailed (+ "the SSH connection was lost"
                         (if why f" ({why})" "")
                         "; what the command had done by then is unknown")
                      self.where))

  (defn _open-channel [self]
    (when (not (and self.transport (.is-active self.transport)))
      (raise (self._lost)))
    (try
      (.open-session self.transport :timeout self.channel-timeout)
      (except [e [paramiko.SSHException EOFError OSError]]
        (raise (self._lost e) :from e))))

  (defn _alive? [self]
    "Keepalive, ssh(1)'s ServerAliveInterval: while a command is quiet, ask
the server every interval whether it is still there; no answer for
interval × count seconds means the connection is dead, whatever TCP thinks."
    (setv now (time.monotonic))
    (when (and self._probe (not (.is-alive self._probe)))
      (setv self._probe None))
    (when (and (is self._probe None) (> (- now self._last-alive) self.alive-interval))
      (setv self._probe (threading.Thread :target self._ask-server :daemon True))
      (.start self._probe))
    (<= (- now self._last-alive) (* self.alive-interval (+ 1 self.alive-count))))

  (defn _ask-server [self]
    ;; The probe's request: any answer, a refusal included, is the server's.
    ;; paramiko gives up on a connection it finds dead without one; a request
    ;; it could not send raises.  Neither is an answer, and a connection that
    ;; died is the command's loop to report (`_lost`, with where and why):
    ;; raised here, it would end the probe's thread with a traceback.
    (try
      (.global-request self.transport "keepalive@openssh.com" :wait True)
      (when (.is-active self.transport)
        (setv self._last-alive (time.monotonic)))
      (except [[EOFError OSError paramiko.SSHException]])))

  (defn run-script [self script input timeout * [limit OUTPUT-LIMIT]]
    (when (is timeout None) (setv timeout self.command-timeout))
    (setv chan (self._open-channel)
          out (OutputBuffer limit)
          err (OutputBuffer limit)
          deadline (when timeout (+ (time.monotonic) timeout)))
    (try
      (.exec-command chan (+ "exec /bin/sh -c " (shlex.quote _REPORT-SIGNAL) " sh "
                             (shlex.quote script)))
      ;; Input goes in from a thread: a command that writes a lot before it
      ;; reads everything would otherwise block us both.
      (setv writer (threading.Thread :target _feed :args #(chan input) :daemon True))
      (.start writer)
      (setv self._last-alive (time.monotonic))
      (while True
        (setv got False)
        (while (.recv-ready chan) (.add out (.recv chan 65536)) (setv got True))
        (while (.recv-stderr-ready chan) (.add err (.recv-stderr chan 65536)) (setv got True))
        (when got (setv self._last-alive (time.monotonic)))
        (when (or chan.closed (and chan.eof-received (.exit-status-ready chan)))
          (break))
        (when (not (.is-active self.transport))
          (raise (self._lost)))
        (when (and deadline (> (time.monotonic) deadline))
          (raise (CommandTimedOut script timeout (bytes->text (.getvalue out))
                                  (bytes->text (.getvalue err)) self.where)))
        (when (not (self._alive?))
          (.close self.transport)
          (raise (self._lost f"no answer from the server for {(* self.alive-interval (+ 1 self.alive-count))} s")))
        (select.select [chan] [] [] 0.5))
      (while (.recv-ready chan) (.add out (.recv chan 65536)))
      (while (.recv-stderr-ready chan) (.add err (.recv-stderr chan 65536)))
      ;; sshd always sends EOF before it closes a channel; a channel closed
      ;; without one was closed by paramiko because the connection died.
      (when (not chan.eof-received)
        (raise (self._lost)))
      #((.recv-exit-status chan) (.getvalue out) (.getvalue err))
      (except [e [EOFError OSError paramiko.SSHException]]
        (raise (self._lost e) :from e))
      (finally
        (.close chan))))

  (defn start-process [self argv]
    (setv chan (self._open-channel))
    (try
      ;; `exec`, so that what runs on the channel is ARGV itself, not a
      ;; login shell waiting for it: the signals `kill` sends reach it.
      (.exec-command chan (+ "exec " (shlex.join argv)))
      (except [e [EOFError OSError paramiko.SSHException]]
        (.close chan)
        (raise (self._lost e) :from e)))
    (SSHProcess chan self.where))

  (defn close [self]
    (for [c (reversed self.owned)]
      (.close c))))

(defclass SSHProcess []
  "A command running on a channel of its own: see `Connection.start-process`."

  ;; How long `kill` lets a command go on TERM before it sends KILL.
  (setv TERM-GRACE 2)

  (defn __init__ [self chan where]
    (setv self.channel chan
          self.where where
          ;; Closing stdin sends EOF on the channel (paramiko's
          ;; ChannelStdinFile.close calls shutdown_write).
          self.stdin (.makefile-stdin chan "wb")
          self.stdout (.makefile chan "rb")
          self.stderr (.makefile-stderr chan "rb")
          self.lost None))

  (defn wait [self [timeout None]]
    "The exit code; 255, as ssh(1) says, when the connection dropped first
(`lost` then says so); None while it runs."
    (when (not (.wait self.channel.status-event timeout))
      (return None))
    (setv code self.channel.exit-status)
    ;; sshd sends EOF before the exit status; a channel closed with neither
    ;; was closed by paramiko because the connection died.
    (when (and (= code -1) (not self.channel.eof-received))
      (setv self.lost (+ f"the SSH connection was lost ({self.where}); "
                         "what the command had done by then is unknown")
            code 255))
    code)

  (defn _signal [self name]
    ;; RFC 4254's "signal" request, which sshd honours with killpg(2) on the
    ;; command's process group; paramiko has no method for it.
    (setv m (paramiko.Message))
    (.add-byte m paramiko.common.cMSG-CHANNEL-REQUEST)
    (.add-int m self.channel.remote-chanid)
    (.add-string m "signal")
    (.add-boolean m False)
    (.add-string m name)
    (try (._send-user-message self.channel.transport m)
         (except [Exception] None)))

  (defn kill [self]
    "TERM, then KILL if it is still there after TERM-GRACE seconds, then
close the channel.  TERM first because sudo and su relay it to the command
they run, which may be another user's and so out of reach of a KILL sent as
this one; closing the channel gives whatever is left end of file."
    (when (not (or self.channel.closed (.is-set self.channel.status-event)))
      (._signal self "TERM")
      (when (not (.wait self.channel.status-event self.TERM-GRACE))
        (._signal self "KILL")))
    (.close self.channel)))

(defn _feed [chan data]
  (try
    (when data (.sendall chan data))
    (.shutdown-write chan)
    (except [Exception] None)))

(defn _connect-error [e c known-hosts]
  "A sysadmin's account of why connecting with the fabric Connection C failed."
  (setv hp f"{c.host}:{c.port}"
        timeout c.connect-timeout
        kh (if known-hosts (get known-hosts 0) "~/.ssh/known_hosts"))
  (cond
    (isinstance e _UnknownHostKey)
    (+ f"the host key of {e.hostname} is not known ({(.get-name e.key)} {e.key.fingerprint}).\n"
       f"  If that fingerprint is right, add it to {kh} (ssh-keyscan -p {c.port} {c.host} >> {kh}), "
       "or connect once with ssh(1); or give the hop :strict-host-key-checking \"accept-new\".")
    (isinstance e paramiko.BadHostKeyException)
    (+ f"REMOTE HOST KEY CHANGED for {hp}: it offered {(.get-name e.key)} {e.key.fingerprint}, "
       f"but known_hosts has {e.expected-key.fingerprint}.\n"
       "  Someone may be intercepting the connection, or the host was reinstalled.  "
       f"If you know why it changed, remove the old key: ssh-keygen -R '[{c.host}]:{c.port}' -f {kh}")
    (isinstance e paramiko.AuthenticationException)
    f"authentication failed for {c.user}@{hp}: none of the keys or agent identities offered was accepted ({e})"
    (isinstance e paramiko.ssh-exception.NoValidConnectionsError)
    f"connection refused by {hp}: is sshd running there, on that port?"
    (isinstance e socket.gaierror)
    f"cannot resolve host name {c.host}: {e.strerror}"
    (isinstance e #(socket.timeout TimeoutError))
    f"timed out after {timeout} s connecting to {hp}"
    ;; paramiko reports a missing greeting as "No existing session" when it
    ;; goes on to authenticate regardless.
    (and (isinstance e paramiko.SSHException)
         (or (in "banner" (str e)) (in "No existing session" (str e))))
    (+ f"{hp} accepted the connection but sent no SSH greeting within {timeout} s "
       "(is an SSH server listening there?)")
    (isinstance e paramiko.ChannelException)
    f"the jump host could not open a connection to {hp}: {e.text}"
    (isinstance e ConnectionRefusedError)
    f"connection refused by {hp}"
    True f"cannot connect to {hp}: {(. (type e) __name__)}: {e}"))

(defn _check-upstream [upstream alias]
  (when (not alias)
    (raise (ChainError ":ssh needs :host when no host is being deployed")))
  (when (not (or (= upstream.hop-name "local") (isinstance upstream SSHConnection)))
    (raise (ChainError (+ f":ssh can follow :local or another :ssh hop, not {upstream.where}; "
                          "put the :ssh hops first in the chain")))))

(defn _fabric-config [config]
  ;; ~/.ssh/config and /etc/ssh/ssh_config, or only the file CONFIG names,
  ;; as `ssh -F` reads it; and Fabric's own configuration files.
  (try
    (fabric.Config :runtime-ssh-path (when config (os.path.expanduser config)))
    (except [e OSError]
      (raise (ConnectionFailed f"cannot read SSH config {config}: {e.strerror}") :from e))))

(defn _fabric-connection [alias user port config timeout identity via]
  "The fabric Connection to ALIAS, not yet open.  Fabric works out the host,
port, user, keys, ConnectTimeout and gateway from the hop's arguments,
`user@host:port` and ssh_config; VIA, an `SSHConnection`, is the gateway
instead of ssh_config's."
  (try
    (setv c (fabric.Connection alias :user user :port port :config (_fabric-config config)
                               :connect-timeout timeout
                               :gateway (when via via.fabric)))
    (except [e ValueError]
      ;; Fabric refuses a user or port given twice.
      (setv what (if (in "port" (str e)) "port" "user"))
      (raise (ChainError (+ f"hop :ssh: :host {(hy.repr alias)} gives the {what}, "
                            f"and so does :{what}; give it once"))
             :from None)))
  (when identity
    ;; Instead of ssh_config's IdentityFile, to which Fabric would add them.
    (setv (get c.connect-kwargs "key_filename") (lfor i identity (os.path.expanduser i))))
  c)

(defn _known-hosts-files [ssh-config]
  (setv user (lfor p (.split (.get ssh-config "userknownhostsfile"
                                   "~/.ssh/known_hosts ~/.ssh/known_hosts2"))
                   (os.path.expanduser p))
        global (lfor p (.split (.get ssh-config "globalknownhostsfile"
                                     "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"))
                     (os.path.expanduser p)))
  #(user global))

(defn _trust-host-keys [c strict-host-key-checking]
  "Load known_hosts into the client of the fabric Connection C and set the
policy for unknown keys, in place of Fabric's, which adds any key; return
the user's known_hosts files (the first is where keys are added)."
  (setv #(user-kh global-kh) (_known-hosts-files c.ssh-config))
  (for [f [#* global-kh #* user-kh]]
    (when (os.path.exists f) (.load-system-host-keys c.client f)))
  (.set-missing-host-key-policy
    c.client (_HostKeyPolicy (_strictness strict-host-key-checking c.ssh-config)
                             (when user-kh (get user-kh 0))))
  user-kh)

(defn _prepare [c strict-host-key-checking timeout]
  "Add to the fabric Connection C what Fabric leaves out: a bound on every
wait of connecting (ConnectTimeout, else TIMEOUT, else 30 s, for the TCP
connection, the greeting, authentication and channels to a jump's next
host), IdentitiesOnly, and host keys checked.  Return C's known_hosts files."
  (when (is c.connect-timeout None)
    (setv c.connect-timeout (int (or timeout DEFAULT-CONNECT-TIMEOUT))))
  (for [k ["banner_timeout" "auth_timeout" "channel_timeout"]]
    (.setdefault c.connect-kwargs k c.connect-timeout))
  (when (= (.lower (.get c.ssh-config "identitiesonly" "no")) "yes")
    (.update c.connect-kwargs {"allow_agent" False "look_for_keys" False}))
  (_trust-host-keys c strict-host-key-checking))

(defn _unopened [c]
  "The fabric Connection C and the ProxyJump gateways it goes through that
are not open yet, the one to open first first."
  (setv out [])
  (while (and (isinstance c fabric.Connection) (not c.is-connected))
    (.insert out 0 c)
    (setv c c.gateway))
  out)

(defn _open [c target alias known-hosts upstream]
  (try
    (.open c)
    (except [e Exception]
      (.close c.client)
      (raise (ConnectionFailed (+ f"ssh {alias}: "
                                  (if (is c target) "" f"through {c.original-host}: ")
                                  (_connect-error e c known-hosts))
                               upstream.where)
             :from e))))

(defn _alive-interval [c]
  (or (int (.get c.ssh-config "serveraliveinterval" 0)) DEFAULT-ALIVE-INTERVAL))

(defn _tune-transport [c]
  "Set TCP_NODELAY and the keepalive on the transport of the open C."
  ;; Every command is a few small round trips; without TCP_NODELAY, Nagle's
  ;; algorithm and delayed ACKs add 40 ms to each.
  (when (isinstance c.transport.sock socket.socket)
    (.setsockopt c.transport.sock socket.IPPROTO_TCP socket.TCP_NODELAY 1))
  (.set-keepalive c.transport (_alive-interval c)))

(defn connect-over [upstream c alias * [own True] [timeout None]
                    [strict-host-key-checking None] [command-timeout None]]
  "The `SSHConnection` over the fabric Connection C, named ALIAS in
messages: C is opened, with the gateways it goes through, unless it is open
already.  OWN: the hop closes what it opened when it closes; else they are
left open, for their owner."
  (_import-ssh-libraries)
  (setv opened [])
  (try
    (for [x (_unopened c)]
      (_open x c alias (_prepare x strict-host-key-checking timeout) upstream)
      (.append opened x))
    (except [BaseException]
      (for [x (reversed opened)] (.close x))
      (raise)))
  (for [x (or opened [c])] (_tune-transport x))
  (SSHConnection upstream c alias
                 :owned (if own opened [])
                 :command-timeout command-timeout
                 :alive-interval (_alive-interval c)
                 :alive-count (int (.get c.ssh-config "serveralivecountmax" DEFAULT-ALIVE-COUNT))
                 :channel-timeout (or c.connect-timeout DEFAULT-CONNECT-TIMEOUT)))

(defn connect [upstream * [host None] [user None] [port None] [config None] [identity None]
               [timeout None] [strict-host-key-checking None] [command-timeout None]]
  "Open an SSH connection to HOST and return the `SSHConnection`."
  (setv alias (or host (get-hostname)))
  (_check-upstream upstream alias)
  (_import-ssh-libraries)
  (connect-over upstream
                (_fabric-connection alias user port config timeout identity
                                    (when (isinstance upstream SSHConnection) upstream))
                alias
                :timeout timeout
                :strict-host-key-checking strict-host-key-checking
                :command-timeout command-timeout))

(setv HOP (Hop "ssh" {"host" STRING "user" STRING "port" PORT "config" STRING
                      "identity" STRINGS "timeout" SECONDS
                      "strict-host-key-checking" (choice-of "yes" "no" "accept-new" "ask" "off")
                      "command-timeout" SECONDS}
               connect))

(export :objects [SSHConnection SSHProcess HOP connect connect-over])
