"An image's command line: `python3 athena.pyz [--check] [--converge] …`,
which the image's `__main__.py` (`consfig.ui.image_main`) hands over to
once its layers are on the path."

(import os
        consfig.image.build [apply-image]
        consfig.ui.command [EXIT-STATUS Parser guarded output-options output-sink])

(defn image-parser [hostname archive]
  "The argument parser of the image ARCHIVE of HOSTNAME."
  (setv p (Parser :prog f"python3 {(os.path.basename archive)}"
                  :description f"Apply the configuration of {hostname} to this machine."
                  :epilog EXIT-STATUS))
  (output-options p)
  (.add-argument p "--as-host" :action "store_true"
                 :help f"apply {hostname}'s configuration even though this machine's hostname is not {hostname}")
  (.add-argument p "--converge" :action "store_true"
                 :help "after applying, stay and keep this machine converged (docs/converge.md)")
  (.add-argument p "--noop" :action "store_true"
                 :help "report drift, repair nothing (implies --check for the first pass)")
  (.add-argument p "--interval" :metavar "SECONDS" :type float
                 :help "with --converge: how often to check a property that watches nothing")
  (.add-argument p "--log-directory" :metavar "DIR"
                 :help "with --converge: where the agent's event log goes (default: consfig's state directory)")
  p)

(defn run-image [archive image meta directories new argv]
  "The command line of an image: apply the host of the image ARCHIVE (the
open zip IMAGE, its META, its layers unpacked in DIRECTORIES, NEW those
unpacked just now) to this machine, as the arguments ARGV ask
(`consfig.image.build.apply-image`); return the exit status.  Called by the
image's `__main__.py`."
  (setv args (.parse-args (image-parser (get meta "hostname") archive) argv))
  (guarded args (fn [args] (apply-image args archive image meta directories new
                                        (output-sink args)))))

(export :objects [image-parser run-image])
