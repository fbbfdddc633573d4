"What a property watches: watch specs, as plain data.

A property's `:watch` subroutine takes its parameters and returns a list of
watch specs, each a JSON-able list that names one resource whose change may
undo the property:

  (watch-path \"/etc/motd\")       [\"path\" \"/etc/motd\"]   the file or directory itself
  (watch-unit \"nginx.service\")   [\"unit\" \"nginx.service\"] a systemd unit's state
  (watch-dpkg)                    [\"dpkg\"]               the dpkg status database
  (watch-poll 60)                 [\"poll\" 60]            no event: re-check every 60 s
  (watch-dataspace \"all\")        [\"dataspace\" \"all\"]   the site's dataspace (\"self\": this host's records)

The converging agent (`consfig.converge.agent`) registers them with a
`consfig.converge.watch.Watcher` on the target.  They are checked when the propapp is
preprocessed on the controller, so that a relative path is refused with the
consfig's file and line.  The agent asks them again on the target when it
arms its watches (`arming`), where a `:watch` may look at the target to name
what only the target knows.  This module imports only the standard library
and consfig's errors: the controller, the target and an image all read it."

(import contextlib
        contextvars
        consfig.errors [PropspecError])

(setv _arming (contextvars.ContextVar "consfig-arming-watches" :default False))

(defn [contextlib.contextmanager] arming []
  "The context in which the converging agent, on the target, asks each
property what to watch (`watching-on-target?`)."
  (setv token (.set _arming True))
  (try (yield) (finally (.reset _arming token))))

(defn watching-on-target? []
  "Whether a `:watch` is being asked by the converging agent on the target,
in a deployment's context, where it may run commands to find what to watch
(a PostgreSQL cluster's data directory).  Elsewhere (preprocessing on the
controller, `consfig doc`) it must say only what its parameters say."
  (.get _arming))

(setv KINDS #("path" "unit" "dpkg" "poll" "dataspace"))

(defn _problem [spec]
  ;; What is wrong with SPEC, or None.
  (when (not (and (isinstance spec #(list tuple)) spec (isinstance (get spec 0) str)))
    (return "a watch spec is a list whose first item names its kind"))
  (setv #(kind #* args) spec)
  (cond
    (not-in kind KINDS)
    f"unknown kind of watch {kind !r}; use one of {(.join ", " KINDS)}"
    (= kind "path")
    (cond (or (!= (len args) 1) (not (isinstance (get args 0) str)))
          "a path watch takes one path"
          (not (.startswith (get args 0) "/"))
          f"a watch on the relative path {(get args 0) !r}: watch an absolute path"
          (in "\x00" (get args 0))
          "a watched path contains a NUL")
    (= kind "unit")
    (cond (or (!= (len args) 1) (not (isinstance (get args 0) str)) (not (get args 0)))
          "a unit watch takes one unit name"
          (or (.startswith (get args 0) "-")
              (any (gfor c (get args 0) (or (< (ord c) 33) (= c "/")))))
          f"{(get args 0) !r} is not a unit name")
    (= kind "dpkg")
    (when args "a dpkg watch takes no argument")
    (= kind "dataspace")
    (when (not (in (list args) [["all"] ["self"]]))
      "a dataspace watch takes \"all\" (every host's records) or \"self\" (this host's)")
    (= kind "poll")
    (when (or (!= (len args) 1)
              (isinstance (get args 0) bool)
              (not (isinstance (get args 0) #(int float)))
              (<= (get args 0) 0))
      "a poll watch takes a number of seconds above 0")))

(defn check-watch-specs [specs [who "a property"]]
  "SPECS, a property's watch specs, as lists; a `PropspecError` naming WHO
(the property) when one of them is not a watch spec."
  (when (not (isinstance specs #(list tuple)))
    (raise (PropspecError f"{who}: its :watch must return a list of watch specs, not {specs !r}")))
  (lfor s specs
        (do (setv problem (_problem s))
            (when problem (raise (PropspecError f"{who}: {problem}")))
            (list s))))

(defn _checked [spec]
  (setv problem (_problem spec))
  (when problem (raise (PropspecError problem)))
  spec)

(defn watch-path [path]
  "Watch PATH, a file or directory (its content, metadata, creation and
deletion); absolute."
  (_checked ["path" path]))

(defn watch-unit [unit]
  "Watch the state of the systemd UNIT (`nginx.service`)."
  (_checked ["unit" unit]))

(defn watch-dpkg []
  "Watch the dpkg status database: a package installed, removed or changed."
  ["dpkg"])

(defn watch-poll [seconds]
  "No event says when this changes: re-check it every SECONDS."
  (_checked ["poll" seconds]))

(defn watch-dataspace [scope]
  "Watch the site's dataspace (consfig.apply.dataspace): SCOPE \"all\", every
host's records; \"self\", this host's own.  Also fired when the dataspace
is lost and when it is back."
  (_checked ["dataspace" scope]))

(export :objects [watch-path watch-unit watch-dpkg watch-poll watch-dataspace check-watch-specs
                  arming watching-on-target?])
