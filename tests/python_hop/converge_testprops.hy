"Properties for the converging agent's tests over a chain.  Imported as the
top-level module `converge_testprops`, as a site's consfig module would be,
so the hop ships it to the target by its file."

(require consfig.model.property [defprop])
(import consfig.apply.actions [read-remote-file remote-exists? run write-remote-file]
        consfig.model.watchspec [watch-path])

(defprop slowly-written :posix [marker path content]
  "PATH holds CONTENT, written (atomically) a moment after the repair has
begun, which it says by creating MARKER: time to stop the agent mid-repair."
  (:desc f"{path} slowly written")
  (:watch [(watch-path path)])
  (:check (and (remote-exists? path) (= (read-remote-file path) content)))
  (:apply (run "sh" "-c" "touch -- \"$1\"; sleep 2" "sh" marker)
          (write-remote-file path content)))
