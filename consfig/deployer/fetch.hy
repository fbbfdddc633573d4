"Files fetched from a target (`file.fetched`), written where the deployment
runs from.

The property reads the file on the target and sends it back in a `fetched`
event (`consfig.apply.events.fetched-event`); `FetchWatch`, between the
deployment and its sink, writes it atomically to its destination here and
passes on a note instead, so that no sink, log or `--json` reader ever sees
the content.  A destination that cannot be written is a failure of the
host's deployment, counted with its others."

(import base64
        binascii
        os
        consfig.apply.events [output-event end-event]
        consfig.util [write-atomically])

(defclass FetchWatch []
  "A sink that passes events on to SINK, but for the `fetched` events of
HOSTNAME's deployment, whose files it writes; `failures` counts those it
could not write."
  (defn __init__ [self sink hostname]
    (setv self.sink sink
          self.hostname hostname
          self.failures 0))

  (defn __call__ [self event]
    (setv kind (.get event "event"))
    (cond (= kind "fetched") (self.sink (self._write event))
          ;; The deployment's own summary counts what could not be written.
          (and (= kind "summary") self.failures (= (.get event "depth" 0) 0)
               (= (.get event "host" self.hostname) self.hostname))
          (self.sink {#** event "status" "failed"
                      "failures" (+ (.get event "failures" 0) self.failures)})
          True (self.sink event)))

  (defn _write [self event]
    (setv dest (.get event "dest")
          where {"host" (.get event "host" self.hostname) "depth" (.get event "depth" 0)})
    (try
      (when (not (and (isinstance dest str) (os.path.isabs dest) (not-in "\x00" dest)))
        (raise (ValueError f"{dest !r} is not an absolute path")))
      (setv data (base64.b64decode (get event "content") :validate True)
            mode (get event "mode"))
      (os.makedirs (os.path.dirname dest) :mode 0o700 :exist-ok True)
      (write-atomically dest data (if (isinstance mode int) mode 0o600))
      {#** (output-event f"fetched {(get event "path")} to {dest} ({(len data)} bytes)") #** where}
      (except [e #(OSError ValueError KeyError binascii.Error)]
        (+= self.failures 1)
        {#** (end-event f"fetching {(.get event "path")} to {dest}" "failed"
                        :message (+ f"cannot write {dest} here: "
                                    (if (isinstance e OSError) (or e.strerror (str e)) (str e)))
                        :property "file.fetched")
         #** where}))))

(export :objects [FetchWatch])
