"The systemd journal's settings: how much it keeps, and where."

(eval-when-compile (require consfig.model.propspec [defpropspec]))
(import consfig.apply.combinators [eseqprops on-change]
        consfig.props [file systemd]
        consfig.props.systemd [setting])

(defn _restarted-on-change [propspec]
  ;; journald reads its configuration only when it starts.
  (on-change propspec (systemd.restarted "systemd-journald")))

(defpropspec configured :posix [#^ setting #* pairs]
  "The journal has the settings PAIRS (alternating keys and values of
journald.conf(5)'s [Journal] section, or one dict), in the drop-in
/etc/systemd/journald.conf.d/consfig.conf; journald restarts when it
changes, where a systemd runs.  Unapplying removes the drop-in.

  (journald.configured \"SystemMaxUse\" \"500M\" \"MaxRetentionSec\" \"1month\")"
  (:desc f"journald configured")
  (_restarted-on-change (systemd.configured "journald" "Journal" #* pairs)))

(defpropspec persistent :posix []
  "The journal is kept on disk, in /var/log/journal, across reboots
(`Storage=persistent`, in its own drop-in, consfig-storage.conf), rather
than in memory only or as the package decides.  Unapplying removes the
setting, and leaves the logs."
  (:desc "journald keeps the journal on disk")
  (_restarted-on-change
    (eseqprops (file.directory-exists "/var/log/journal")
               (systemd.configured "journald" "Journal" "Storage" "persistent"
                                   :name "consfig-storage"))))

(export :objects [configured persistent])
