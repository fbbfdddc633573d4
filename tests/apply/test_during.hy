;; `during` and facts (consfig.model.fact, consfig.props.fact): properties held
;; while a fact holds on the target, retracted when it does not; facts as
;; propspec data, checked where they are written.  Applied for real over
;; :local, on real files.

(require consfig *
         consfig.model.fact [deffact])
(import consfig *
        consfig.apply.combinators [during-facts during-reevaluated]
        consfig.transport.local [LocalConnection]
        consfig.model.context [applying]
        consfig.model.fact [fact-holds? fact-watch]
        consfig.model.host [Host]
        consfig.site.load [load-consfig]
        json
        os
        pathlib
        pytest)
(use-props consfig.props [fact file])

(setv HOSTNAME f"during-{(os.getpid)}.consfig.invalid")

(defn record-file []
  (pathlib.Path (state-directory) "during" f"{HOSTNAME}.json"))

(defn [(pytest.fixture :autouse True)] fresh-record []
  (.unlink (record-file) :missing-ok True)
  (yield)
  (.unlink (record-file) :missing-ok True))

(defn deploy-props [events propspec * [check False]]
  (deploy-these* [:local] (make-host HOSTNAME None None (eseqprops)) propspec
                 :sink events :check check))

(defn notes [events]
  (lfor e events.events :if (= (get e "event") "output") :if (= (get e "stream") "note") e))

(defn note-texts [events]
  (lfor e (notes events) (get e "text")))

(defn holds-here? [fact]
  (with [(applying (Host "test.example" None) (LocalConnection))]
    (fact-holds? fact)))

(defn consfig-error [tmp-path text]
  "The error loading TEXT as a consfig gives."
  (setv f (/ tmp-path "site.hy"))
  (.write-text f (+ "(require consfig *)\n(import consfig *)\n"
                    "(use-props consfig.props [fact file systemd])\n" text))
  (try (load-consfig (str f))
       (except [e ConsfigError] (return (str e))))
  (assert False "the consfig loaded without error"))

(defn maintenance-block [tmp-path]
  ;; While FLAG exists: PAGE (can be unapplied) and NOTE (cannot).
  (propapp (during (fact.file-exists (str (/ tmp-path "flag")))
             (file.exists-with-content (str (/ tmp-path "page")) "down for maintenance\n")
             (file.has-content (str (/ tmp-path "note")) "maintenance happened\n"))))

;; Facts as data

(defn test-a-fact-application-prints-as-hy-and-reads-back-equal []
  (setv p (propapp (fact.file-matches "/etc/motd" "^Welcome")))
  (assert (= (propspec->string p) "(consfig.props.fact.file-matches \"/etc/motd\" \"^Welcome\")")
          (propspec->string p))
  (assert (= (read-propspec (propspec->string p)) p) "reads back equal"))

(defn test-a-during-block-round-trips-through-printed-hy-and-json-data []
  (setv p (propapp (during (fact.negated (fact.unit-active "nginx.service"))
                     (file.contains-lines "/etc/motd" "nginx is down"))))
  (assert (= (read-propspec (propspec->string p)) p) (propspec->string p))
  (assert (= (data->propspec (json.loads (json.dumps (propspec->data p)))) p)
          "back from JSON, equal"))

(defn test-a-user-writes-during-and-facts-by-their-short-names []
  (assert (= (read-propspec "(during (fact.file-exists \"/x\") (file.directory-exists \"/y\"))")
             (propapp (during (fact.file-exists "/x") (file.directory-exists "/y"))))
          "bare during, fact.NAME"))

;; Bad input, refused at load with file and line

(defn test-a-during-whose-condition-is-a-property-is-refused-with-file-and-line [tmp-path]
  (setv msg (consfig-error tmp-path "\n(defhost h.example {}\n  (during (systemd.stopped \"nginx\") (file.directory-exists \"/y\")))\n"))
  (assert (in "site.hy:6: during: fact must be a fact application" msg) msg)
  (assert (in "not (consfig.props.systemd.stopped \"nginx\")" msg) msg))

(defn test-a-during-whose-condition-is-a-string-is-refused-with-file-and-line [tmp-path]
  (setv msg (consfig-error tmp-path "(during \"/etc/consfig/maintenance\" (file.directory-exists \"/y\"))"))
  (assert (in "site.hy:4: during: fact must be a fact application" msg) msg)
  (assert (in "not \"/etc/consfig/maintenance\"" msg) msg))

(defn test-an-unknown-fact-is-refused-at-load-with-the-nearest-name [tmp-path]
  (setv msg (consfig-error tmp-path "(defhost h.example {}\n  (during (fact.file-exist \"/m\") (file.directory-exists \"/y\")))"))
  (assert (in "site.hy:5:" msg) msg)
  (assert (in "fact.file-exist" msg) msg)
  (assert (in "did you mean fact.file-exists?" msg) msg))

(defn test-a-fact-with-a-wrong-argument-type-is-refused-naming-the-parameter [tmp-path]
  (setv msg (consfig-error tmp-path "(during (fact.file-exists \"relative\") (file.directory-exists \"/y\"))"))
  (assert (in "site.hy:4: fact.file-exists: path must be an absolute path" msg) msg))

(defn test-a-fact-with-too-many-arguments-is-called-a-fact [tmp-path]
  (setv msg (consfig-error tmp-path "(during (fact.file-exists \"/a\" \"/b\") (file.directory-exists \"/y\"))"))
  (assert (in "site.hy:4: wrong arguments for fact fact.file-exists" msg) msg))

(defn test-a-during-without-properties-is-refused [tmp-path]
  (setv msg (consfig-error tmp-path "(during (fact.file-exists \"/m\"))"))
  (assert (in "site.hy:4: during: needs the properties" msg) msg))

(defn test-a-fact-among-the-properties-of-a-during-is-refused [tmp-path]
  (setv msg (consfig-error tmp-path "(during (fact.file-exists \"/m\") (fact.file-exists \"/n\"))"))
  (assert (in "site.hy:4: during: fact.file-exists is a fact, not a property" msg) msg))

(defn test-a-fact-standing-as-a-property-is-refused-when-the-host-is-prepared [tmp-path]
  (setv msg (consfig-error tmp-path "(defhost h.example {}\n  (fact.file-exists \"/m\"))\n(import consfig.model.host [preprocess-host])\n(preprocess-host h)"))
  (assert (in "site.hy:5:" msg) msg)
  (assert (in "fact.file-exists is a fact, not a property: it can only be the condition of a during" msg) msg))

(defn test-a-deffact-without-holds-is-refused-at-load [tmp-path]
  (setv msg (consfig-error tmp-path "(require consfig.model.fact [deffact])\n(deffact nothing [x] (:desc \"x\"))"))
  (assert (in "site.hy:5" msg) msg)
  (assert (in "deffact nothing: a fact needs (:holds …)" msg) msg))

(deffact watches-relative [path]
  "A fact whose watch is wrong."
  (:holds True)
  (:watch [["path" path]]))

(defn test-a-watch-spec-on-a-relative-path-is-refused-naming-the-fact []
  (with [e (pytest.raises PropspecError)]
    (during-facts (propapp (during (watches-relative "etc/x") (file.directory-exists "/y")))))
  (assert (in "watches-relative: its :watch gave [\"path\" \"etc/x\"]" (str e.value)) (str e.value))
  (assert (in "absolute path" (str e.value)) (str e.value)))

;; For the converging agent

(defn test-during-facts-gives-each-block-its-fact-and-watch-specs []
  (setv inner (propapp (during (fact.unit-active "nginx.service") (file.directory-exists "/b")))
        outer (propapp (during (fact.file-exists "/m") (file.directory-exists "/a") inner))
        found (during-facts (propapp (eseqprops (file.directory-exists "/c") outer))))
  (assert (= (lfor d found (get d "during")) [outer inner]) "outermost first")
  (assert (= (lfor d found (get d "watch")) [[["path" "/m"]] [["unit" "nginx.service"]]])
          found))

(defn test-facts-give-watch-specs-for-paths-units-and-polls []
  (assert (= (fact-watch (propapp (fact.file-contains-line "/etc/hosts" "127.0.0.1 x")))
             [["path" "/etc/hosts"]]) "a file: its path")
  (assert (= (fact-watch (propapp (fact.unit-state "cron.service" :failed)))
             [["unit" "cron.service"]]) "a unit: its name")
  (assert (= (fact-watch (propapp (fact.command-output ["hostname"] "web1" :poll 30)))
             [["poll" 30]]) "a command: polled")
  (assert (= (fact-watch (propapp (fact.negated (fact.file-exists "/m")))) [["path" "/m"]])
          "a negation: its fact's"))

;; Facts read real files

(defn test-file-exists-holds-for-anything-at-the-path-even-a-dangling-symlink [tmp-path]
  (os.symlink "/nonexistent" (/ tmp-path "dangling"))
  (assert (holds-here? (propapp (fact.file-exists (str (/ tmp-path "dangling"))))) "dangling")
  (assert (not (holds-here? (propapp (fact.file-exists (str (/ tmp-path "none")))))) "absent"))

(defn test-file-has-content-compares-the-whole-file [tmp-path]
  (.write-text (/ tmp-path "f") "a\nb\n")
  (assert (holds-here? (propapp (fact.file-has-content (str (/ tmp-path "f")) "a\nb\n"))) "same")
  (assert (not (holds-here? (propapp (fact.file-has-content (str (/ tmp-path "f")) "a\n"))))
          "a prefix is not the content"))

(defn test-file-contains-line-wants-a-whole-line [tmp-path]
  (.write-text (/ tmp-path "f") "mode=maintenance\n")
  (assert (holds-here? (propapp (fact.file-contains-line (str (/ tmp-path "f")) "mode=maintenance")))
          "whole line")
  (assert (not (holds-here? (propapp (fact.file-contains-line (str (/ tmp-path "f")) "mode"))))
          "part of a line"))

(defn test-file-matches-searches-each-line-and-fails-on-no-file [tmp-path]
  (.write-text (/ tmp-path "f") "x\nstate: down\n")
  (assert (holds-here? (propapp (fact.file-matches (str (/ tmp-path "f")) "^state: (down|off)$")))
          "matches the second line")
  (assert (not (holds-here? (propapp (fact.file-matches (str (/ tmp-path "g")) ".*"))))
          "no file, no match"))

(defn test-command-output-runs-an-argv-and-ignores-trailing-newlines [tmp-path]
  (assert (holds-here? (propapp (fact.command-output ["printf" "%s\\n" "$(id)"] "$(id)")))
          "the argument is not shell code")
  (assert (not (holds-here? (propapp (fact.command-output ["sh" "-c" "echo x; exit 3"] "x"))))
          "a failing command does not hold"))

(defn test-unit-active-does-not-hold-for-a-unit-that-does-not-exist []
  (assert (not (holds-here? (propapp (fact.unit-active "consfig-no-such-unit.service"))))
          "asked of the real systemctl: no such unit is active"))

(defn test-negated-holds-when-its-fact-does-not [tmp-path]
  (assert (holds-here? (propapp (fact.negated (fact.file-exists (str (/ tmp-path "none"))))))
          "nothing there"))

;; During, applied over :local

(defn test-during-applies-its-properties-while-the-fact-holds [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (setv outcome (deploy-props events (maintenance-block tmp-path)))
  (assert (= (.read-text (/ tmp-path "page")) "down for maintenance\n") "applied")
  (assert (in f"during {tmp-path}/flag exists: holds" (note-texts events)) (note-texts events))
  (assert (= outcome.status "changed") (events.ends)))

(defn test-during-applies-nothing-while-the-fact-does-not-hold [events tmp-path]
  (setv outcome (deploy-props events (maintenance-block tmp-path)))
  (assert (not (.exists (/ tmp-path "page"))) "not applied")
  (assert (in f"during {tmp-path}/flag exists: does not hold" (note-texts events)) (note-texts events))
  (assert (in f"not applied: {tmp-path}/note has content" (note-texts events)) (note-texts events))
  (assert (= outcome.status "no-change") (events.ends)))

(defn test-during-unapplies-its-properties-once-the-fact-stops-holding [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (.unlink (/ tmp-path "flag"))
  (.clear events.events)
  (setv outcome (deploy-props events (maintenance-block tmp-path)))
  (assert (not (.exists (/ tmp-path "page"))) "retracted: the file is gone")
  (assert (= (events.status-of f"Unapplied: {tmp-path}/page exists with content") "changed")
          (events.ends))
  (assert (= outcome.status "changed") (events.ends)))

(defn test-during-drops-what-cannot-be-unapplied-with-an-event-saying-so-once [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (.unlink (/ tmp-path "flag"))
  (.clear events.events)
  (deploy-props events (maintenance-block tmp-path))
  (setv dropped (lfor e (notes events) :if (in "dropped" e) (get e "dropped")))
  (assert (= dropped [f"{tmp-path}/note has content"]) (note-texts events))
  (assert (.exists (/ tmp-path "note")) "what cannot be unapplied stays")
  (.clear events.events)
  (deploy-props events (maintenance-block tmp-path))
  (assert (not (lfor e (notes events) :if (in "dropped" e) e))
          "dropped once: the next deployment has nothing to drop"))

(defn test-during-reapplies-when-the-fact-holds-again [events tmp-path]
  (for [present [True False True]]
    (if present (.touch (/ tmp-path "flag")) (.unlink (/ tmp-path "flag")))
    (deploy-props events (maintenance-block tmp-path))
    (assert (= (.exists (/ tmp-path "page")) present)
            f"page {(if present "applied" "retracted")} while the flag is {(if present "there" "gone")}")))

(defn test-during-records-the-blocks-it-applied-and-forgets-them-once-retracted [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (setv record (json.loads (.read-text (record-file))))
  (assert (= (len (get record "applied")) 1) record)
  (assert (= (oct (& (. (os.stat (record-file)) st-mode) 0o777)) "0o600") "private")
  (.unlink (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (assert (not (.exists (record-file))) "nothing applied, nothing recorded"))

(defn test-during-retracts-what-can-be-unapplied-even-without-a-record [events tmp-path]
  (.write-text (/ tmp-path "page") "down for maintenance\n")
  (deploy-props events (maintenance-block tmp-path))
  (assert (not (.exists (/ tmp-path "page")))
          "a property that can be unapplied is unapplied whenever the fact does not hold"))

(defn test-a-damaged-record-fails-the-during-with-what-to-do [events tmp-path]
  (.mkdir (. (record-file) parent) :parents True :exist-ok True)
  (.write-text (record-file) "not json")
  (setv outcome (deploy-props events (maintenance-block tmp-path)))
  (assert (= outcome.status "failed") (events.ends))
  (setv msg (get (lfor e events.events :if (in "message" e) (get e "message")) 0))
  (assert (in "remove it to start afresh" msg) msg))

(defn test-check-mode-says-the-fact-holds-and-changes-nothing [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (setv outcome (deploy-props events (maintenance-block tmp-path) :check True))
  (assert (in f"during {tmp-path}/flag exists: holds" (note-texts events)) (note-texts events))
  (assert (= (events.status-of f"{tmp-path}/page exists with content") "would-change") (events.ends))
  (assert (not (.exists (/ tmp-path "page"))) "nothing applied")
  (assert (not (.exists (record-file))) "nothing recorded")
  (assert (= outcome.status "changed") "would change"))

(defn test-check-mode-shows-what-would-be-retracted [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (.unlink (/ tmp-path "flag"))
  (.clear events.events)
  (deploy-props events (maintenance-block tmp-path) :check True)
  (assert (in f"during {tmp-path}/flag exists: does not hold" (note-texts events)) (note-texts events))
  (assert (= (events.status-of f"Unapplied: {tmp-path}/page exists with content") "would-change")
          (events.ends))
  (assert (any (gfor t (note-texts events) (.startswith t f"would drop: {tmp-path}/note has content")))
          (note-texts events))
  (assert (.exists (/ tmp-path "page")) "nothing retracted"))

(defn test-unapplying-a-during-retracts-its-properties-whatever-the-fact [events tmp-path]
  (.touch (/ tmp-path "flag"))
  (deploy-props events (maintenance-block tmp-path))
  (deploy-props events (unapplied (maintenance-block tmp-path)))
  (assert (not (.exists (/ tmp-path "page"))) "retracted though the flag is there"))

(defn test-a-negated-fact-holds-its-properties-while-the-file-is-absent [events tmp-path]
  (setv block (propapp (during (fact.negated (fact.file-exists (str (/ tmp-path "flag"))))
                         (file.exists-with-content (str (/ tmp-path "up")) "serving\n"))))
  (deploy-props events block)
  (assert (.exists (/ tmp-path "up")) "no flag: applied")
  (.touch (/ tmp-path "flag"))
  (deploy-props events block)
  (assert (not (.exists (/ tmp-path "up"))) "flag: retracted"))

(defprop data-at :posix [version]
  "Provide the item (\"--test\", \"during\") at VERSION."
  (:hostattrs (provide-data "--test" "during" "x" :version version)))

(defn test-data-version-is-holds-for-the-version-the-host-is-deployed-with [events tmp-path]
  (setv page (str (/ tmp-path "page")))
  (deploy-props events (propapp (eseqprops (data-at "2")
                                           (during (fact.data-version-is "--test" "during" "2")
                                             (file.exists-with-content page "v2\n")))))
  (assert (.exists (/ tmp-path "page")) "version 2: held")
  (deploy-props events (propapp (eseqprops (data-at "3")
                                           (during (fact.data-version-is "--test" "during" "2")
                                             (file.exists-with-content page "v2\n")))))
  (assert (not (.exists (/ tmp-path "page"))) "version 3: retracted"))

(defprop reevaluates :posix [flag block]
  "Create FLAG, then evaluate BLOCK again, as the agent does when a watch fires."
  (:apply (.touch (pathlib.Path flag))
          (during-reevaluated block)))

(defn test-during-reevaluated-applies-one-block-again-after-its-fact-changed [events tmp-path]
  (setv block (maintenance-block tmp-path))
  (deploy-props events (propapp (eseqprops block (reevaluates (str (/ tmp-path "flag")) block))))
  (assert (.exists (/ tmp-path "page")) "the second evaluation saw the flag")
  (assert (= (lfor t (note-texts events) :if (.startswith t "during") (get (.split t ": ") -1))
             ["does not hold" "holds"])
          (note-texts events)))
