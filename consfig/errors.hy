"The conditions consfig signals, as values a sysadmin can act on.

Every error a user can cause by a mistake is a `ConsfigError`: the command line
and the REPL print its message and nothing else (the traceback only at `-v`).
Property outcomes are separate: `FailedChange` and its subclasses end one
property, and the combinators decide what happens to the rest."

(import importlib.util
        os
        signal
        sys
        traceback
        consfig.util [bounded])

(defclass ConsfigError [Exception]
  "A mistake in a consfig, a chain or a command line, reported without a
traceback (but at -v, unless `expected`: the traceback would say nothing)."
  (setv expected False)
  (defn __init__ [self message [where None]]
    (.__init__ (super) message)
    (setv self.message message
          self.where where))
  (defn __str__ [self]
    (if self.where f"{self.where}: {self.message}" self.message)))

(defclass PropspecError [ConsfigError]
  "A propspec could not be built: unknown property, wrong arguments, bad form.")

(defclass ChainError [ConsfigError]
  "A connection chain is malformed or names an unknown hop or argument.")

(defclass ConnectionFailed [ConsfigError]
  "A hop could not be established, or an established one broke.")

(defclass LockBusy [ConnectionFailed]
  "Another deployment held the target's deployment lock for longer than this
one would wait: nothing is wrong with consfig, so even at -v no traceback
is shown (`expected`)."
  (setv expected True))

(defclass CannotStartProcess [ConnectionFailed]
  "A hop that only runs scripts was asked to start a process while it runs
(`Connection.start-process`): what a `:python` hop after it needs, and the
deployment lock.")

(defclass InapplicableProperty [ConsfigError]
  "Raised from a `:hostattrs` subroutine: this property cannot apply to this host.
The deployment stops before any connection is made.")

(defclass DeferredRead [BaseException]
  "Raised by a read of another host's hostattrs while a host's hostattrs are
computed without other hosts' (see `consfig.model.host`): the property that read
is left out of that computation.  Not an `Exception`, so that nothing on the
way mistakes it for a failure of the property.")

(defclass FailedChange [Exception]
  "A property failed to apply; something may have changed on the way."
  (defn __init__ [self message]
    (.__init__ (super) message)
    (setv self.message message))
  (defn __str__ [self] self.message))

(defclass AbortedChange [FailedChange]
  "A property failed before it changed anything.")

(import errno [ENOENT])

(defn _on [where] (if where f" on {where}" ""))

(setv _SYMLINK-RULE (+ "a symlink that a user other than root owns is followed only to "
                       "what that user owns (docs/security.md)"))

(defclass UnsafePath [AbortedChange]
  "A file operation refused a path: on the way to it, a symlink that a user
other than root owns leads to something that user does not own; or, over a
chain with no Python, a directory that another user may change (see
docs/security.md).  RULE is the rule broken, for the message."
  (defn __init__ [self path why [where None] * [rule _SYMLINK-RULE]]
    (.__init__ (super) f"refusing {path}{(_on where)}: {why}; {rule}")
    (setv self.path path)))

(defclass SymlinkNotFollowed [FileNotFoundError]
  "A file operation found a symlink at the end of its path and did not follow
it: a property follows one only when told (`:follow true`).  Reading such a
path finds no file (so a write replaces the link); changing its mode is refused."
  (defn __init__ [self path [where None]]
    (.__init__ (super) ENOENT "is a symlink, not followed" path)
    (setv self.message (+ f"{path}{(_on where)} is a symlink, and consfig does not follow "
                          "a symlink at the end of a path unless the property says :follow true")))
  (defn __str__ [self] self.message))

(defclass ConnectionLost [FailedChange]
  "The connection a property acted through broke: nothing more can be
applied through it, so every sequence stops, `seqprops` included.")

(defclass CommandFailed [FailedChange]
  "A command exited non-zero.  Carries the command, its exit code and its output."
  (defn __init__ [self command exit-code stdout stderr [where None]]
    (setv self.command command
          self.exit-code exit-code
          self.stdout stdout
          self.stderr stderr)
    ;; Each stream bounded first: a command's output may be 16 MiB.
    (setv output (.strip (+ (bounded (or stdout "")) (bounded (or stderr "")))))
    (.__init__ (super)
      (+ "command " (_exit-text exit-code)
         (if where f" on {where}" "")
         f": {command}"
         (if output (+ "\n" (indented (_last-lines output))) "")))))

;; How much of a failed command's output its failure shows: the end, where
;; the reason usually is, and of very long lines their head and tail.  The
;; whole is in the exception (and, for commands that report their output,
;; shown at -v).
(setv FAILURE-OUTPUT-LINES 20)

(defn _last-lines [text]
  (setv lines (.splitlines text)
        left-out (- (len lines) FAILURE-OUTPUT-LINES))
  (bounded (if (> left-out 0)
               (.join "\n" [f"… {left-out} earlier lines not shown"
                            #* (cut lines (- FAILURE-OUTPUT-LINES) None)])
               text)))

(defn _exit-text [code]
  ;; A negative code is Python's for a process killed by a signal; a shell
  ;; reports a child it saw killed as 128 + the signal.  (A program may exit
  ;; 128 + N of its own accord, hence the code alongside.)
  (setv sig (cond (not (isinstance code int)) None
                  (< code 0) (- code)
                  (< 128 code 193) (- code 128)))
  (setv name (when sig
               (try (cut (. (signal.Signals sig) name) 3 None)
                    (except [ValueError] None))))
  (cond name (+ f"killed by signal {name}" (if (> code 0) f" (exit code {code})" ""))
        True f"failed with exit code {code}"))

(defclass CommandTimedOut [CommandFailed]
  "A command ran past its timeout and was stopped."
  (defn __init__ [self command timeout stdout stderr [where None]]
    (.__init__ (super) command None stdout stderr where)
    (setv self.timeout timeout
          self.message (+ f"command timed out after {timeout} s"
                          (if where f" on {where}" "")
                          f": {command}")
          self.args #(self.message))))

(defn site-location [e]
  "Where in site code (a consfig, or a site's own property module) the
exception E was raised: `file.hy:LINE` of the innermost such frame of its
traceback, or None when it arose in consfig or a library."
  (setv found None)
  (for [frame (traceback.extract-tb e.__traceback__)]
    (when (site-file? frame.filename)
      (setv found f"{(os.path.basename frame.filename)}:{frame.lineno}")))
  found)

(defn controller-where [where]
  "WHERE, a site location (`file.hy:LINE`) a target's Python reported, as
the controller names it: a consfig travels to the target as its module
(`consfig_site_web.hy`), which here is loaded from the site's own file
(`web.hy`)."
  (setv #(file _ line) (.rpartition (str where) ":")
        module (when (and (.startswith file "consfig_site_") (.endswith file ".hy"))
                 (.get sys.modules (cut file 0 -3))))
  (if (and line (getattr module "__file__" None))
      f"{(os.path.basename module.__file__)}:{line}"
      where))

(defn site-file? [filename]
  "Whether FILENAME is site code: Hy that is neither consfig's own (its
core, its property library, its connections) nor Hy's or hyrule's; the
example sites shipped in consfig/hosts are site code too."
  (setv path (os.path.realpath filename))
  (and (.endswith path ".hy")
       (not (any (gfor d _LIBRARY-DIRS (.startswith path d))))))

(setv _LIBRARY-DIRS
      (lfor m ["consfig" "consfig.props" "consfig.connections" "hy" "hyrule"]
            :setv spec (importlib.util.find-spec m)
            :if (and spec spec.submodule-search-locations)
            d spec.submodule-search-locations
            (+ (os.path.realpath d) os.sep)))

(defn indented [text [prefix "    "]]
  "TEXT with PREFIX before each of its lines: another program's output
quoted in a message."
  (.join "\n" (gfor line (.splitlines text) (+ prefix line))))

(export :objects [LockBusy ConsfigError PropspecError ChainError ConnectionFailed CannotStartProcess
                  InapplicableProperty FailedChange AbortedChange ConnectionLost
                  CommandFailed CommandTimedOut UnsafePath SymlinkNotFollowed
                  site-location controller-where site-file?])
