"The converging agent as a service of the host (docs/converge.md).

`running` installs the host's own image (`image.installed`) and runs it as
the systemd service consfig-converge.service: `python3 IMAGE --converge`
applies the host, then keeps it converged, repairing what drifts as it
drifts, with no controller.  `consfig converge HOST --follow` shows what it
does from the controller."

(eval-when-compile
  (require consfig.model.propspec [defpropspec]))
(import hy.models [Keyword]
        consfig.apply.combinators [unapplied with-unapply]
        consfig.props [image systemd]
        consfig.types *)

(setv SERVICE "consfig-converge.service")

(defn service-text [argv]
  "The unit file of the agent running ARGV: restarted when it fails, but
not more than 5 times in 10 minutes, so that a crash loop does not thrash;
stopped with SIGTERM, which it obeys once the repair in progress is done."
  (.join "\n" ["[Unit]"
               "Description=consfig: keep this host converged"
               "After=network-online.target"
               "StartLimitIntervalSec=600"
               "StartLimitBurst=5"
               ""
               "[Service]"
               "Type=simple"
               ;; So that systemd sets HOME: the agent's lock is the one a
               ;; deployment takes, in root's cache directory.
               "User=root"
               f"ExecStart={(.join " " (map image.systemd-quote argv))}"
               "Restart=on-failure"
               "RestartSec=10"
               "KillSignal=SIGTERM"
               "TimeoutStopSec=120"
               ""
               "[Install]"
               "WantedBy=multi-user.target"
               ""]))

(defpropspec running :posix [* #^ boolean [noop False] #^ (optional (int-range 1 86400)) [interval None]
                             #^ abs-path [python "/usr/bin/python3"]]
  "The converging agent runs on the host, from its own image, as the systemd
service consfig-converge.service: it applies the host, then watches what its
properties manage and re-applies what drifts (docs/converge.md).  NOOP: it
reports drift and repairs nothing; INTERVAL: seconds between checks of a
property that watches nothing (300 by default).  Its events go to the
journal and to the log `consfig converge HOST --follow` reads.  Unapplying
stops the service and removes its unit (disabling it); the image stays."
  (:desc (+ "the converging agent runs" (if noop " (noop)" "")))
  (setv argv [python image.IMAGE-PATH "--converge"
              #* (if noop ["--noop"] [])
              #* (if interval ["--interval" (str interval)] [])])
  ;; with-unapply's marker as a value: in a call, `:unapply` would take
  ;; only the one argument after it.
  (setv unit (systemd.unit-file SERVICE (service-text argv)))
  (with-unapply
    (image.installed)
    unit
    (systemd.enabled SERVICE)
    (systemd.started SERVICE)
    (Keyword "unapply")
    (systemd.stopped SERVICE)
    (unapplied unit)))

(export :objects [SERVICE service-text running])
