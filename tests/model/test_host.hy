;; Hosts and hostattrs.

(require consfig *)
(import consfig *
        pytest)
(use-props consfig.props [os])

(setv applied [])

(defprop pushes :posix [k v]
  "Push V onto hostattr K."
  (:hostattrs (push-hostattr k v)))

(defprop needs-debian :posix []
  "Only for Debian hosts."
  (:hostattrs (os.required "debian"))
  (:apply (.append applied "needs-debian")))

(defprop reads-hostattr :posix [k]
  "Record hostattr K as seen while applying."
  (:apply (.append applied (get-hostattr k)) :no-change))

(defhost hostattrs.example.org {:deploy :local}
  "Hostattr tests."
  (pushes "colour" "red")
  (pushes "colour" "blue")
  (os.debian-stable "bookworm" :amd64))

(defhost "10.1.2.3" {:deploy :local})

(defn [(pytest.fixture :autouse True)] reset []
  (.clear applied))

(defn test-defhost-binds-first-label-and-registers-full-hostname []
  (assert (is hostattrs (find-host "hostattrs.example.org")) "bound to first label")
  (assert (is hostattrs (find-host "hostattrs")) "first label finds it")
  (assert (= hostattrs.desc "Hostattr tests.") hostattrs.desc)
  (assert (= (hy.repr hostattrs.deploy) ":local") hostattrs.deploy))

(defn test-defhost-string-hostname-binds-predictable-name []
  (assert (= host-10-1-2-3.hostname "10.1.2.3") "string hostname"))

(defn test-unknown-host-lists-known-hosts []
  (with [e (pytest.raises ConsfigError)]
    (find-host "nonesuch.example"))
  (assert (in "hostattrs.example.org" (str e.value)) (str e.value)))

(defn test-later-pushes-win []
  (setv h (preprocess-host hostattrs))
  (assert (= (get-hostattr "colour" h) "blue") h.hostattrs)
  (assert (= (get-hostattrs "colour" h) ["blue" "red"]) h.hostattrs)
  (assert (= (get-hostattr "hostname" h) "hostattrs.example.org") h.hostattrs))

(defn test-os-declaration-is-a-hostattr []
  (setv os-value (get-hostattr "os" (preprocess-host hostattrs)))
  (assert (= os-value {"type" "debian-stable" "arch" "amd64" "suite" "bookworm"}) os-value)
  (assert (os.isa? os-value "debian") "debian-stable is a debian")
  (assert (os.isa? os-value "linux") "and a linux")
  (assert (not (os.isa? os-value "debian-testing")) "but not testing"))

(defn test-hostattrs-are-readable-while-applying [events]
  (deploy-these* [:local] hostattrs (reads-hostattr "colour") :sink events)
  (assert (= applied ["blue"]) applied))

(defn test-inapplicable-property-vetoes-before-anything-applies [events]
  (with [e (pytest.raises InapplicableProperty)]
    (deploy-these* [:local] host-10-1-2-3 (needs-debian) :sink events))
  (assert (in "10.1.2.3" (str e.value)) (str e.value))
  (assert (in "debian" (str e.value)) (str e.value))
  (assert (= applied []) "nothing applied")
  (assert (= events.events []) "no events: nothing started"))

(defn test-unapplied-property-pushes-no-hostattrs []
  (setv h (preprocess-host hostattrs (unapplied (pushes "colour" "green"))))
  (assert (not-in "green" (get-hostattrs "colour" h)) h.hostattrs))

(defn test-python-property-over-a-shell-chain-is-refused-up-front []
  (defprop pythonic :python [] "Needs Python." (:apply None))
  (with [e (pytest.raises ConsfigError)]
    (deploy-these* [[:chroot :into "/nonexistent"]] hostattrs (pythonic)))
  (assert (in ":python hop" (str e.value)) (str e.value)))

(defn test-host-round-trips-through-json-data []
  (import json)
  (setv h (preprocess-host hostattrs)
        back (Host.<-data (json.loads (json.dumps (.->data h)))))
  (assert (= back.propspec h.propspec) "propspec")
  (assert (= back.hostattrs h.hostattrs) "hostattrs"))

(defn test-every-os-declaration-declares-its-type []
  (for [[p expected] [[(propapp (os.debian-testing :amd64)) {"type" "debian-testing" "arch" "amd64" "suite" "testing"}]
                      [(propapp (os.debian-unstable :arm64)) {"type" "debian-unstable" "arch" "arm64" "suite" "unstable"}]
                      [(propapp (os.linux :riscv64)) {"type" "linux" "arch" "riscv64"}]]]
    (setv h (preprocess-host host-10-1-2-3 p))
    (assert (= (get-hostattr "os" h) expected) h.hostattrs)))

(defn test-host-defined-twice-in-one-consfig-names-both-places [tmp-path]
  (import consfig.site.load [load-consfig])
  (setv f (/ tmp-path "twice.hy"))
  (.write-text f "(require consfig *)\n(import consfig *)\n(defhost twice.example {})\n\n(defhost twice.example {})\n")
  (with [e (pytest.raises ConsfigError)] (load-consfig (str f)))
  (setv msg (str e.value))
  (assert (in "host twice.example is defined twice: at" msg) msg)
  (assert (and (in "twice.hy:3" msg) (in "twice.hy:5" msg)) msg))

(defn test-host-redefined-outside-a-consfig-load-replaces-the-first []
  (defhost again.example {})
  (defhost again.example {} (pushes "k" "v"))
  (assert (= (len (. (find-host "again.example") propspec args)) 1) "second definition kept"))

(defhost calling.example.org {:deploy :local}
  "A host called with options, as from the REPL."
  (reads-hostattr "hostname"))

(defn test-calling-a-host-with-an-unknown-option-names-it-and-the-known-ones []
  (with [e (pytest.raises ConsfigError)]
    (calling :bogus 1))
  (setv msg (str e.value))
  (assert (in ":bogus" msg) msg)
  (assert (in ":check" msg) msg)
  (assert (not-in "hyx_" msg) msg))

(defn test-a-host-called-in-check-mode-says-it-would-change []
  (setv outcome (calling :check True :sink (fn [e] None)))
  (assert (in "would" (repr outcome)) (repr outcome)))
