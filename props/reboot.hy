"Rebooting a host at the end of its deployment.

  (on-change (apt.installed \"linux-image-amd64\") (reboot.at-end))

`reboot.at-end`, or a property's own `(request-reboot REASON)`, asks for a
reboot; however often it is asked for, the host reboots once, at the end of
the deployment: after its handlers, and only when nothing failed.  The
reboot is scheduled a minute later (`shutdown -r +1`), so that the
deployment can end and report.  Over a chain that leaves the controller's
machine, consfig then waits for the host to come back (a new boot id), at
most :wait seconds, before it reports the deployment's outcome; a host
deploying another (`deploys`) carries on once it is back.  A host that does
not come back in time is a failure.  In a chroot nothing reboots (it would
be the machine the chroot is on); in check mode the reboot that would happen
is shown, and nothing is scheduled."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.apply.actions [NO-CHANGE Script run]
        ;; Not `at-end`, which this module defines: a property of that name.
        consfig.apply.engine [WOULD-CHANGE announce-action checking? current-ending emit inform
                              at-end :as at-deployment-end]
        consfig.apply.events [end-event]
        consfig.transport.hop [command->script]
        consfig.model.host [get-hostname]
        consfig.apply.noservices [no-services-reason]
        consfig.model.context [connection]
        consfig.apply.rebooting [BOOT-ID-SCRIPT reboot-event]
        consfig.types *)

(setv DEFAULT-COMMAND ["shutdown" "-r" "+1"]
      DEFAULT-WAIT 600)

(setv reboot-command (named "reboot-command"
                            (predicate "argv" ""
                                       (fn [v] (and (.accepts (non-empty-list-of text) v)
                                                    (not (.startswith (get v 0) "-")))))
                            "an argv (a list of strings, its program not starting with -) that schedules a reboot and returns"))

(setv _DESC "Rebooted at the end of the deployment")

;; Shell code that exits 0 in a chroot: where / is not init's root.  When
;; init's root cannot be seen (no /proc, or not this user's to look at), /
;; is taken for a system's if it is a file system's own root directory
;; (inode 2 on ext2-4, 128 on XFS, 256 on Btrfs), as a chroot's seldom is.
;; Not ischroot(1): it takes a mount namespace of one's own (a systemd
;; service's ProtectSystem=, `ip netns exec`) for a chroot.
(setv CHROOT-TEST "
r=$(stat -Lc %d:%i /proc/1/root/ 2>/dev/null) || r=
if [ -n \"$r\" ]; then [ \"$(stat -c %d:%i /)\" != \"$r\" ]; exit; fi
case $(stat -c %i /) in 2|128|256) exit 1 ;; esac")

(defn _in-chroot? []
  (. (run (Script CHROOT-TEST) :check False :timeout 30) ok?))

(defn _request []
  (.setdefault (. (current-ending) state) "reboot"
               {"reasons" [] "wait" 0 "command" None}))

(defn request-reboot [reason * [wait DEFAULT-WAIT] [command None]]
  "Ask for a reboot of the host at the end of the deployment being applied,
for REASON (words for the operator): once, after the handlers, unless the
deployment failed.  WAIT: seconds to wait for the host to come back (the
longest asked for wins); COMMAND: the argv that schedules it (the first
asked for wins; by default `shutdown -r +1`)."
  (setv r (_request))
  (when (not-in reason (get r "reasons"))
    (.append (get r "reasons") reason))
  (setv (get r "wait") (max (get r "wait") wait))
  (when (is (get r "command") None)
    (setv (get r "command") command))
  (at-deployment-end "reboot" _rebooting :last True))

(defn _rebooting [failed]
  (setv r (_request)
        why (.join "; " (get r "reasons")))
  (when failed
    (emit (end-event _DESC "skipped"))
    (inform f"not rebooting ({why}): this deployment failed")
    (return NO-CHANGE))
  (announce-action _DESC (fn [] (_reboot r why))))

(defn _reboot [r why]
  (setv command (or (get r "command") DEFAULT-COMMAND)
        chroot (or (no-services-reason (connection)) (and (_in-chroot?) "in a chroot")))
  (cond chroot
        (do (inform f"not rebooting ({why}): this runs {chroot}, and the machine it is on would reboot")
            NO-CHANGE)
        (checking?)
        (do (inform f"would reboot ({why}), with {(command->script command)}")
            WOULD-CHANGE)
        True
        (do (setv boot-id (.strip (. (run (Script BOOT-ID-SCRIPT) :check False :timeout 30) stdout)))
            (run #* command :timeout 60)
            (emit (reboot-event (+ f"{(get-hostname)} reboots ({why}): "
                                   (command->script command))
                                (or boot-id None)
                                (get r "wait")))
            :changed)))

(defprop at-end :posix [* #^ (int-range 1 86400) [wait DEFAULT-WAIT]
                        #^ reboot-command [command DEFAULT-COMMAND]
                        #^ non-empty-line [reason "reboot.at-end"]]
  "The host reboots at the end of the deployment: once, however often this
is applied, after the handlers, and only when nothing failed.  COMMAND
schedules the reboot and returns at once, so that the deployment can end
(by default `shutdown -r +1`, a minute later).  Over a chain that leaves
the controller's machine, consfig waits at most WAIT seconds for the host
to come back (a new boot id) before it reports.  In a chroot, nothing
reboots.  REASON says why, to the operator.  See `consfig.props.reboot`."
  (:unwatched "an action: a reboot at the end of the run it is in")
  (:desc "Reboot at the end of the deployment requested")
  (:simulates True)
  (:apply
    (request-reboot reason :wait wait :command command)
    (if (checking?) WOULD-CHANGE :changed)))

(export :objects [at-end request-reboot CHROOT-TEST])
