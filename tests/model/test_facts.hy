;; Facts from other hosts: reading the hostattrs of the site's other hosts.

(require consfig *)
(import consfig *
        consfig.model.host [hosts site-facts-scope]
        consfig.model.propspec [propspec->string]
        os
        pytest
        tempfile)
(use-props consfig.props [file])

(setv computed [])

(defprop pushes :posix [k v]
  "Push V onto hostattr K."
  (:hostattrs (push-hostattr k v)))

(defprop pushes-from :posix [k host other-key]
  "Push onto hostattr K the values of HOST's hostattr OTHER-KEY."
  (:hostattrs (push-hostattr k #* (get-hostattrs host other-key))))

(defprop counted :posix []
  "Count the computations of the host's hostattrs."
  (:hostattrs (.append computed (get-hostname))))

(defprop noted :posix [v]
  "Push V onto hostattr noted."
  (:hostattrs (push-hostattr "noted" v)))

(defpropspec notes-every-key :posix []
  "A propapp carrying every host's hostattr key."
  `(noted ~(hosts-with-hostattr "key")))

(defpropspec notes-group :posix [group]
  "A propapp carrying the hosts of GROUP."
  `(noted ~(hosts-in-group group)))

(defn [(pytest.fixture :autouse True)] only-this-tests-hosts []
  ;; Reading every host computes every host's hostattrs: leave out the
  ;; hosts other test modules define (some on purpose broken).
  (setv saved (dict hosts))
  (.clear hosts)
  (.clear computed)
  (yield)
  (.clear hosts)
  (.update hosts saved))

(defn site [#** hosts-props]
  ;; Hosts NAME.facts.test with the given propapps.
  (dfor [name props] (.items hosts-props)
        name (make-host f"{name}.facts.test" {} None (eseqprops #* props))))

(defn test-get-hostattrs-reads-another-host-by-name []
  (site :db1 [(pushes "ip" "192.0.2.10")]
        :web [(pushes-from "db-ip" "db1.facts.test" "ip")])
  (setv web (preprocess-host (get hosts "web.facts.test")))
  (assert (= (get-hostattrs "db-ip" web) ["192.0.2.10"]) web.hostattrs)
  (assert (= (get-hostattr "db1.facts.test" "ip") "192.0.2.10") "from outside a host too")
  (assert (= (get-hostattr "db1" "ip") "192.0.2.10") "by first label"))

(defn test-get-hostattrs-keeps-reading-a-prepared-host-either-way []
  (setv h (preprocess-host (get (site :p [(pushes "colour" "red")]) "p")))
  (assert (= (get-hostattrs "colour" h) ["red"]) "key first, as before")
  (assert (= (get-hostattrs h "colour") ["red"]) "host first"))

(defn test-reading-an-unknown-host-names-it []
  (site :a [(pushes-from "x" "nowhere.facts.test" "y")])
  (with [e (pytest.raises ConsfigError)]
    (preprocess-host (get hosts "a.facts.test")))
  (assert (in "unknown host nowhere.facts.test" (str e.value)) (str e.value)))

(defn test-hosts-with-hostattr-gives-every-host-that-has-it-the-reader-too []
  (site :a [(pushes "key" "ka") (notes-every-key)]
        :b []
        :c [(pushes "key" "kc")])
  (setv a (preprocess-host (get hosts "a.facts.test")))
  (assert (= (get-hostattr "noted" a) {"a.facts.test" ["ka"] "c.facts.test" ["kc"]})
          (get-hostattr "noted" a)))

(defn test-hosts-that-read-each-other-are-not-a-cycle []
  ;; Every host lists every host's key: what each reads does not depend on
  ;; what the others read.
  (site :a [(pushes "key" "ka") (notes-every-key)]
        :b [(notes-every-key) (pushes "key" "kb")])
  (setv both {"a.facts.test" ["ka"] "b.facts.test" ["kb"]})
  (with [(site-facts-scope)]
    (for [name ["a.facts.test" "b.facts.test"]]
      (setv h (preprocess-host (get hosts name)))
      (assert (= (get-hostattr "noted" h) both) f"{name}: {(get-hostattr "noted" h)}"))))

(defn test-a-host-reads-one-that-reads-it-back-other-values []
  ;; b's y comes from a's z; a's x from b's y: no cycle.
  (site :a [(pushes-from "x" "b.facts.test" "y") (pushes "z" "1")]
        :b [(pushes "y" "base") (pushes-from "y" "a.facts.test" "z")])
  (setv a (preprocess-host (get hosts "a.facts.test")))
  (assert (= (get-hostattrs "x" a) ["1" "base"]) a.hostattrs))

(defn test-a-chain-of-reads-through-several-hosts []
  (site :h0 [(pushes-from "v" "h1.facts.test" "v")]
        :h1 [(pushes-from "v" "h2.facts.test" "v")]
        :h2 [(pushes-from "v" "h3.facts.test" "v")]
        :h3 [(pushes "v" "end")])
  (assert (= (get-hostattrs "v" (preprocess-host (get hosts "h0.facts.test"))) ["end"])
          "the value at the end of the chain"))

(defn test-a-cycle-is-an-error-naming-the-hosts-in-it []
  (site :a [(pushes "x" "seed") (pushes-from "x" "b.facts.test" "y")]
        :b [(pushes-from "y" "a.facts.test" "x")]
        :c [])
  (with [e (pytest.raises ConsfigError)]
    (preprocess-host (get hosts "a.facts.test")))
  (setv msg (str e.value))
  (assert (in "a.facts.test -> b.facts.test -> a.facts.test" msg) msg)
  (assert (in "b.facts.test reads a.facts.test's \"x\"" msg) msg)
  (assert (not-in "c.facts.test" msg) msg))

(defn test-a-cycle-stops-the-deployment-before-any-connection []
  (setv path (os.path.join (tempfile.mkdtemp) "applied"))
  (site :a [(pushes "x" "seed") (pushes-from "x" "b.facts.test" "y")
            (file.has-content path "applied\n")]
        :b [(pushes-from "y" "a.facts.test" "x")])
  (with [e (pytest.raises ConsfigError)]
    (deploy* [:local] "a.facts.test"))
  (assert (in "depend on each other" (str e.value)) (str e.value))
  (assert (not (os.path.exists path)) "nothing applied"))

(defn test-a-host-is-computed-once-however-many-read-it []
  (site :db [(counted) (pushes "ip" "192.0.2.7")]
        :w1 [(pushes-from "db" "db.facts.test" "ip")]
        :w2 [(pushes-from "db" "db.facts.test" "ip")])
  (with [(site-facts-scope)]
    (for [name ["w1.facts.test" "w2.facts.test" "db.facts.test"]]
      (preprocess-host (get hosts name))))
  (assert (= computed ["db.facts.test"]) computed))

(defn test-hosts-in-group-counts-groups-declared-and-pushed []
  (make-host "w1.facts.test" {:groups ["web"]} None (eseqprops))
  (make-host "w2.facts.test" {} None (eseqprops (pushes "groups" "web")))
  (make-host "db.facts.test" {:groups ["db"]} None (eseqprops))
  (make-host "lb.facts.test" {} None (eseqprops (notes-group "web")))
  (setv lb (preprocess-host (get hosts "lb.facts.test")))
  (assert (= (get-hostattr "noted" lb) ["w1.facts.test" "w2.facts.test"]) (get-hostattr "noted" lb)))

(defn test-a-defpropspec-expands-the-same-in-every-host-that-reads []
  ;; The same propapp in two hosts, one expanded while the other is: not a
  ;; property including itself.
  (site :a [(pushes "key" "ka") (notes-every-key)]
        :b [(pushes "key" "kb") (notes-every-key)])
  (setv a (preprocess-host (get hosts "a.facts.test")))
  (assert (in "notes-every-key" (propspec->string a.propspec)) (propspec->string a.propspec)))
