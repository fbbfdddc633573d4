"Properties of type :python for the :python hop's tests.  Imported as the
top-level module `remote_testprops`, as a site's consfig module would be, so
the hop ships it to the target by its file."

(require consfig.model.property [defprop])
(import os
        signal
        sys
        time
        consfig.apply.actions [NO-CHANGE run-script])

(defprop python-wrote :python [path text]
  "PATH holds TEXT, written with open() by the Python on the target."
  (:desc f"{path} written by Python")
  (:check (and (os.path.exists path)
               (= (with [f (open path)] (.read f)) text)))
  (:apply (with [f (open path "w")] (.write f text))))

(defprop slept :python [seconds]
  "Nothing changes, slowly: the target sleeps for SECONDS."
  (:desc f"slept {seconds} s")
  (:apply (time.sleep seconds) NO-CHANGE))

(defprop raised :python [message]
  "Always fails: raises a ValueError with MESSAGE."
  (:desc "a property that raises")
  (:apply (raise (ValueError message))))

(defprop pid-recorded :python [path]
  "PATH holds the process ids of the Python applying this host and of its parent."
  (:desc f"pid recorded in {path}")
  (:apply (with [f (open path "w")] (.write f f"{(os.getpid)} {(os.getppid)}"))))

(defprop died :python []
  "The Python applying this host kills itself."
  (:desc "the target dies")
  (:apply (os.kill (os.getpid) signal.SIGKILL)))

(defprop ran-for-at-most :posix [script seconds]
  "The shell code SCRIPT ran, and was stopped if it took more than SECONDS."
  (:desc f"ran {script} for at most {seconds} s")
  (:apply (run-script script :timeout seconds)))

(defprop modules-recorded :python [path]
  "PATH lists the modules the Python applying this host has imported so
far, one a line.  Nothing changes that the deployment would report."
  (:desc f"modules recorded in {path}")
  (:apply (with [f (open path "w")] (.write f (.join "\n" (sorted sys.modules))))
          NO-CHANGE))
