"Facts: what a `during` waits on.

  (use-props consfig.props [fact systemd])
  (during (fact.file-exists \"/etc/consfig/maintenance\")
    (systemd.stopped \"nginx\"))

Each fact only reads the target, through the connection, so it works over
any chain; each says what to watch to notice that it changed (a path, a
unit, a poll).  Files are read through symlinks: a fact compares their
content and shows it nowhere.  See consfig.model.fact to define your own with
`deffact`, and docs/converge.md."

(eval-when-compile (require consfig.model.fact [deffact]))
(import re
        consfig.apply.actions [run remote-exists?]
        consfig.model.context [connection]
        consfig.data.items [data-version require-data]
        consfig.errors [FailedChange]
        consfig.model.fact [fact-application fact-holds? fact-hostattrs fact-watch]
        consfig.model.property [propapp-desc]
        consfig.props.systemd [unit-name]
        consfig.types *)

(defn _text [path]
  ;; The file's text (bytes that are not UTF-8 as lone surrogates), or None.
  (try (.decode (.read-file (connection) path :follow True) "utf-8" "surrogateescape")
       (except [FileNotFoundError] None)))

(deffact file-exists [#^ abs-path path]
  "Something (a file, a directory, a symlink, even a dangling one) is at PATH."
  (:desc f"{path} exists")
  (:holds (remote-exists? path))
  (:watch [["path" path]]))

(deffact file-has-content [#^ abs-path path #^ text content]
  "The file at PATH has exactly CONTENT."
  (:desc f"{path} has the given content")
  (:holds (= (_text path) content))
  (:watch [["path" path]]))

(deffact file-contains-line [#^ abs-path path #^ line line]
  "The file at PATH has a line that is LINE (the whole line)."
  (:desc f"{path} contains the line {line !r}")
  (:holds (in line (.splitlines (or (_text path) ""))))
  (:watch [["path" path]]))

(deffact file-matches [#^ abs-path path #^ regex pattern]
  "The file at PATH exists and PATTERN (a Python regular expression,
multi-line: `^` and `$` match at each line) matches somewhere in it."
  (:desc f"{path} matches {pattern !r}")
  (:holds (setv text (_text path))
          (and (is-not text None) (bool (re.search pattern text re.MULTILINE))))
  (:watch [["path" path]]))

(defn _unit-state [unit]
  ;; What `systemctl is-active` prints: active, inactive, failed, …
  (setv r (run "systemctl" "is-active" "--" unit :check False :timeout 60))
  (when (= r.exit-code 127)
    (raise (FailedChange f"cannot tell the state of {unit}: there is no systemctl here")))
  (.strip r.stdout))

(deffact unit-active [#^ unit-name unit]
  "The systemd unit UNIT is active (`systemctl is-active`)."
  (:desc f"{unit} is active")
  (:holds (= (_unit-state unit) "active"))
  (:watch [["unit" unit]]))

(setv unit-active-state (enum "active" "inactive" "failed" "activating" "deactivating"
                              "reloading"))

(deffact unit-state [#^ unit-name unit #^ unit-active-state state]
  "The systemd unit UNIT is in STATE (`:active`, `:failed`, …), as
`systemctl is-active` says."
  (:desc f"{unit} is {state.name}")
  (:holds (= (_unit-state unit) state.name))
  (:watch [["unit" unit]]))

(setv argv (named "argv" (non-empty-list-of text)
                  "a command as a non-empty list of strings (the program first)"))

(deffact command-output [#^ argv command #^ text expected * #^ seconds [poll 60]]
  "The command COMMAND (an argv: run as it is, no shell) exits 0 and its
standard output, trailing newlines aside, is EXPECTED.  It is run again
every POLL seconds by the converging agent; it should only read."
  (:desc f"{(.join " " command)} prints {expected !r}")
  (:holds (setv r (run command :check False))
          (and r.ok? (= (.rstrip r.stdout "\n") (.rstrip expected "\n"))))
  (:watch [["poll" poll]]))

(deffact command-succeeds [#^ argv command * #^ seconds [poll 60]]
  "The command COMMAND (an argv: run as it is, no shell) exits 0.  It is
run again every POLL seconds by the converging agent; it should only read."
  (:desc f"{(.join " " command)} succeeds")
  (:holds (. (run command :check False) ok?))
  (:watch [["poll" poll]]))

(deffact data-version-is [#^ non-empty-line iden1 #^ non-empty-line iden2
                          #^ non-empty-line version]
  "The prerequisite data item (IDEN1, IDEN2) the host is deployed with has
VERSION (docs/data.md).  It changes only with a new deployment (or image),
so it has nothing to watch."
  (:desc f"data ({iden1} {iden2}) is at version {version}")
  (:hostattrs (require-data iden1 iden2))
  (:holds (= (data-version iden1 iden2) version)))

(deffact negated [#^ fact-application fact]
  "FACT does not hold: `(during (fact.negated (fact.file-exists P)) …)`
holds its properties while nothing is at P."
  (:desc (+ "not: " (propapp-desc fact)))
  (:hostattrs (fact-hostattrs fact))
  (:holds (not (fact-holds? fact)))
  (:watch (fact-watch fact)))
