"The `:ssh` hop: run scripts on another machine over one SSH connection.

`[:ssh :host \"db1\" :user \"deploy\"]` opens one SSH connection, with
paramiko, when the chain is established and runs every script of the
deployment on its own channel of that connection.  The host defaults to the
hostname of the host being deployed.  `~/.ssh/config` (or the file `:config`
names) supplies HostName, Port, User, IdentityFile, ProxyJump, ProxyCommand,
ConnectTimeout, ServerAliveInterval/CountMax, UserKnownHostsFile and
StrictHostKeyChecking, as it would for ssh(1); hop arguments win over it.

An `:ssh` hop after another one connects through it (a `direct-tcpip`
channel, as `ssh -J` does): `[[:ssh :host \"bastion\"] [:ssh :host \"db1\"]]`."

(import base64
        getpass
        hashlib
        io
        os
        os.path
        re
        select
        shlex
        socket
        sys
        threading
        time
        consfig.errors [ChainError CommandTimedOut ConnectionFailed]
        consfig.frames [OUTPUT-LIMIT OutputBuffer]
        consfig.hop [Connection Hop PORT SECONDS STRING STRINGS choice-of]
        consfig.host [get-hostname]
        consfig.util [bytes->text])

(setv DEFAULT-CONNECT-TIMEOUT 30
      DEFAULT-ALIVE-INTERVAL 15
      DEFAULT-ALIVE-COUNT 3)

;; The script runs in a child shell whose death by a signal its parent sees
;; and turns into an exit code (128 + N): sshd would report it as an
;; exit-signal, which paramiko ignores, leaving only "exit code -1".
(setv _REPORT-SIGNAL "/bin/sh -c \"$1\"; exit $?")

(defn _fingerprint [key]
  (+ "SHA256:" (.decode (.rstrip (base64.b64encode (.digest (hashlib.sha256 (.asbytes key))))
                                 b"=")
                        "ascii")))

(setv paramiko None
      _UnknownHostKey None
      _HostKeyPolicy None)

(defn _import-ssh-libraries []
  ;; paramiko takes a tenth of a second to import: a chain is parsed and
  ;; checked without it, and only a deployment that connects over :ssh
  ;; pays for it.
  (global paramiko _UnknownHostKey _HostKeyPolicy)
  (when (is paramiko None)
    (setv pm (_import-paramiko)
          #(_UnknownHostKey _HostKeyPolicy) (_host-key-classes pm)
          paramiko pm)
    ;; A dropped connection is reported in consfig's words, where it
    ;; matters; without a handler of its own, paramiko's log would reach
    ;; Python's last resort and print "Socket exception: …" whenever it
    ;; happens (an idle connection the REPL keeps, dying).
    (import logging)
    (.addHandler (logging.getLogger "paramiko") (logging.NullHandler))))

(defn _import-paramiko []
  ;; paramiko imports invoke, which is half of its import time, only to run
  ;; the commands of ssh_config's `Match exec`: it is imported without it,
  ;; and `_ssh-config` hands it over when a configuration uses that.
  (when (in "invoke" sys.modules)
    (import paramiko)
    (return paramiko))
  (setv (get sys.modules "invoke") None)
  (try
    (import paramiko)
    (except [ImportError]
      ;; A paramiko that cannot do without: let it have invoke.
      (del (get sys.modules "invoke"))
      (import paramiko))
    (finally
      (when (is (.get sys.modules "invoke" False) None)
        (del (get sys.modules "invoke")))))
  paramiko)

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
              (.write f f"{hostname} {(.get-name key)} {(.get-base64 key)}\n")))
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

(defn _known-hosts-files [ssh-config]
  (setv user (lfor p (.split (.get ssh-config "userknownhostsfile"
                                   "~/.ssh/known_hosts ~/.ssh/known_hosts2"))
                   (os.path.expanduser p))
        global (lfor p (.split (.get ssh-config "globalknownhostsfile"
                                     "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"))
                     (os.path.expanduser p)))
  #(user global))

(defn _parse-jump [spec]
  "`user@host:port` → #(host user port)."
  (setv #(user _ hostport) (.rpartition spec "@")
        #(host port) #(hostport None))
  (when (and (.count hostport ":") (= (.count hostport ":") 1))
    (setv #(host port) (.split hostport ":")
          port (int port)))
  #(host (or user None) port))

(defclass SSHConnection [Connection]
  "Scripts run on their own channel of one SSH connection, as
`exec /bin/sh -c SCRIPT` whatever the user's login shell."
  (setv hop-name "ssh")

  (defn __init__ [self upstream target alias * [jumps None]
                  [command-timeout None] [alive-interval DEFAULT-ALIVE-INTERVAL]
                  [alive-count DEFAULT-ALIVE-COUNT] [channel-timeout DEFAULT-CONNECT-TIMEOUT]]
    (.__init__ (super) upstream)
    (setv self.target target
          self.transport target.transport
          self.alias alias
          self.jumps (or jumps [])
          self.command-timeout command-timeout
          self.alive-interval alive-interval
          self.alive-count alive-count
          self.channel-timeout channel-timeout
          self._probe None
          self._last-alive (time.monotonic)))

  (defn describe [self] f"ssh:{self.target.user}@{self.alias}")

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
      (setv self._probe None
            self._last-alive now))
    (when (and (is self._probe None) (> (- now self._last-alive) self.alive-interval))
      (setv self._probe (threading.Thread
                          :target (fn [] (.global-request self.transport "keepalive@openssh.com"
                                                          :wait True))
                          :daemon True))
      (.start self._probe))
    (<= (- now self._last-alive) (* self.alive-interval (+ 1 self.alive-count))))

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
    (.close self.target)
    (for [j (reversed self.jumps)]
      (.close j))))

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

(defn _connect-error [e alias host port user connect-timeout known-hosts]
  "A sysadmin's account of why connecting failed."
  (setv hp f"{host}:{port}"
        kh (if known-hosts (get known-hosts 0) "~/.ssh/known_hosts"))
  (cond
    (isinstance e _UnknownHostKey)
    (+ f"the host key of {e.hostname} is not known ({(.get-name e.key)} {(_fingerprint e.key)}).\n"
       f"  If that fingerprint is right, add it to {kh} (ssh-keyscan -p {port} {host} >> {kh}), "
       "or connect once with ssh(1); or give the hop :strict-host-key-checking \"accept-new\".")
    (isinstance e paramiko.BadHostKeyException)
    (+ f"REMOTE HOST KEY CHANGED for {hp}: it offered {(.get-name e.key)} {(_fingerprint e.key)}, "
       f"but known_hosts has {(_fingerprint e.expected-key)}.\n"
       "  Someone may be intercepting the connection, or the host was reinstalled.  "
       f"If you know why it changed, remove the old key: ssh-keygen -R '[{host}]:{port}' -f {kh}")
    (isinstance e paramiko.AuthenticationException)
    f"authentication failed for {user}@{hp}: none of the keys or agent identities offered was accepted ({e})"
    (isinstance e paramiko.ssh-exception.NoValidConnectionsError)
    f"connection refused by {hp}: is sshd running there, on that port?"
    (isinstance e socket.gaierror)
    f"cannot resolve host name {host}: {e.strerror}"
    (isinstance e #(socket.timeout TimeoutError))
    f"timed out after {connect-timeout} s connecting to {hp}"
    ;; paramiko reports a missing greeting as "No existing session" when it
    ;; goes on to authenticate regardless.
    (and (isinstance e paramiko.SSHException)
         (or (in "banner" (str e)) (in "No existing session" (str e))))
    (+ f"{hp} accepted the connection but sent no SSH greeting within {connect-timeout} s "
       "(is an SSH server listening there?)")
    (isinstance e ConnectionRefusedError)
    f"connection refused by {hp}"
    True f"cannot connect to {hp}: {(. (type e) __name__)}: {e}"))

(defn _ssh-config [config]
  ;; The file CONFIG names, or ~/.ssh/config then /etc/ssh/ssh_config, as
  ;; ssh(1) reads them: the first value found for a keyword wins.
  (setv parsed (paramiko.SSHConfig)
        paths (if config [(os.path.expanduser config)]
                  (lfor p ["~/.ssh/config" "/etc/ssh/ssh_config"] (os.path.expanduser p))))
  (for [path paths]
    (try
      (with [f (open path)]
        (setv text (.read f)))
      (except [e OSError]
        (when config
          (raise (ConnectionFailed f"cannot read SSH config {config}: {e.strerror}") :from e))
        (continue)))
    (when (re.search r"(?im)^\s*match\b.*\bexec\b" text)
      (_let-paramiko-run-commands))
    (.parse parsed (io.StringIO text)))
  parsed)

(defn _let-paramiko-run-commands []
  ;; `Match exec` runs a command, which paramiko does with invoke.
  (import invoke paramiko.config)
  (setv paramiko.config.invoke invoke))

(defn _check-upstream [upstream alias]
  (when (not alias)
    (raise (ChainError ":ssh needs :host when no host is being deployed")))
  (when (not (or (= upstream.hop-name "local") (isinstance upstream SSHConnection)))
    (raise (ChainError (+ f":ssh can follow :local or another :ssh hop, not {upstream.where}; "
                          "put the :ssh hops first in the chain")))))

(defclass _Target []
  "Where and as whom to connect, worked out as ssh(1) would from the
ssh_config and the hop's arguments, which win; and the paramiko client."
  (defn __init__ [self alias user port config timeout]
    (setv #(host alias-user alias-port) (_parse-jump alias)
          self.ssh-config (.lookup (_ssh-config config) host)
          self.host (.get self.ssh-config "hostname" host)
          self.user (or user alias-user (.get self.ssh-config "user") (getpass.getuser))
          self.port (or port alias-port (int (.get self.ssh-config "port" 22)))
          self.connect-timeout (int (or timeout DEFAULT-CONNECT-TIMEOUT))
          self.connect-kwargs {}
          self.client (paramiko.SSHClient)
          self.transport None)
    (when (.get self.ssh-config "identityfile")
      (setv (get self.connect-kwargs "key_filename") (list (get self.ssh-config "identityfile")))))
  (defn open [self]
    (.connect self.client :hostname self.host :port self.port :username self.user
              :timeout self.connect-timeout #** self.connect-kwargs)
    (setv self.transport (.get-transport self.client)))
  (defn close [self]
    (.close self.client)))

(defn _trust-host-keys [dest strict-host-key-checking]
  "Load known_hosts into DEST's client and set the policy for unknown keys;
return the user's known_hosts files (the first is where keys are added)."
  (setv #(user-kh global-kh) (_known-hosts-files dest.ssh-config)
        client dest.client)
  (for [f [#* global-kh #* user-kh]]
    (when (os.path.exists f) (.load-system-host-keys client f)))
  (.set-missing-host-key-policy
    client (_HostKeyPolicy (_strictness strict-host-key-checking dest.ssh-config)
                           (when user-kh (get user-kh 0))))
  user-kh)

(defn _set-authentication [dest identity]
  (.update dest.connect-kwargs {"banner_timeout" dest.connect-timeout
                                "auth_timeout" dest.connect-timeout})
  (when identity
    (setv (get dest.connect-kwargs "key_filename")
          (lfor i (if (isinstance identity str) [identity] identity) (os.path.expanduser i))))
  (when (= (.lower (.get dest.ssh-config "identitiesonly" "no")) "yes")
    (setv (get dest.connect-kwargs "allow_agent") False
          (get dest.connect-kwargs "look_for_keys") False)))

(defn _configured? [ssh-config key]
  (and (in key ssh-config) (!= (.lower (get ssh-config key)) "none")))

(defn _open-jumps [dest upstream jumps config timeout strict-host-key-checking]
  "The `SSHConnection` to tunnel through: the upstream :ssh hop, or the last
of the ProxyJump hosts, connected one through the other and appended to
JUMPS; None to connect directly."
  (cond
    (isinstance upstream SSHConnection) upstream
    (_configured? dest.ssh-config "proxyjump")
    (do (for [j (.split (get dest.ssh-config "proxyjump") ",")]
          (setv #(jh ju jp) (_parse-jump (.strip j)))
          (.append jumps (connect (if jumps (get jumps -1) upstream)
                                  :host jh :user ju :port jp :config config
                                  :timeout timeout
                                  :strict-host-key-checking strict-host-key-checking)))
        (get jumps -1))
    True None))

(defn _set-socket [dest via]
  (cond
    via
    (setv (get dest.connect-kwargs "sock")
          (.open-channel via.transport "direct-tcpip" #(dest.host dest.port) #("" 0)
                         :timeout dest.connect-timeout))
    (_configured? dest.ssh-config "proxycommand")
    (setv (get dest.connect-kwargs "sock") (paramiko.ProxyCommand (get dest.ssh-config "proxycommand")))))

(defn _tune-transport [dest]
  "Set TCP_NODELAY and the keepalive; return the keepalive interval."
  ;; Every command is a few small round trips; without TCP_NODELAY, Nagle's
  ;; algorithm and delayed ACKs add 40 ms to each.
  (when (isinstance dest.transport.sock socket.socket)
    (.setsockopt dest.transport.sock socket.IPPROTO_TCP socket.TCP_NODELAY 1))
  (setv interval (or (int (.get dest.ssh-config "serveraliveinterval" 0)) DEFAULT-ALIVE-INTERVAL))
  (.set-keepalive dest.transport interval)
  interval)

(defn connect [upstream * [host None] [user None] [port None] [config None] [identity None]
               [timeout None] [strict-host-key-checking None] [command-timeout None]]
  "Open an SSH connection to HOST and return the `SSHConnection`."
  (setv alias (or host (get-hostname)))
  (_check-upstream upstream alias)
  (_import-ssh-libraries)
  (setv dest (_Target alias user port config timeout)
        user-kh (_trust-host-keys dest strict-host-key-checking)
        jumps [])
  (_set-authentication dest identity)
  (try
    (_set-socket dest (_open-jumps dest upstream jumps config timeout strict-host-key-checking))
    (.open dest)
    (except [e Exception]
      (.close dest)
      (for [j (reversed jumps)] (.close j))
      (when (isinstance e #(ConnectionFailed ChainError)) (raise))
      (raise (ConnectionFailed (+ f"ssh {alias}: "
                                  (_connect-error e alias dest.host dest.port dest.user
                                                  dest.connect-timeout user-kh))
                               upstream.where)
             :from e)))
  (setv interval (_tune-transport dest))
  (SSHConnection upstream dest alias
                 :jumps jumps
                 :command-timeout command-timeout
                 :alive-interval interval
                 :alive-count (int (.get dest.ssh-config "serveralivecountmax" DEFAULT-ALIVE-COUNT))
                 :channel-timeout dest.connect-timeout))

(setv HOP (Hop "ssh" {"host" STRING "user" STRING "port" PORT "config" STRING
                      "identity" STRINGS "timeout" SECONDS
                      "strict-host-key-checking" (choice-of "yes" "no" "accept-new" "ask" "off")
                      "command-timeout" SECONDS}
               connect))

(export :objects [SSHConnection SSHProcess HOP connect])
