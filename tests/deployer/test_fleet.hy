;; Choosing hosts, and the counts of --max-fail and --serial.

(require consfig *)
(import consfig *
        consfig.deployer.fleet [parse-count]
        consfig.model.host [hosts]
        pytest)

(defprop joins :posix [group]
  "Put the host in GROUP, from its hostattrs."
  (:hostattrs (push-hostattr "groups" group)))

(defprop vetoes :posix []
  "Veto any host."
  (:hostattrs (inapplicable "not here")))

(defhost alpha.fleet-a.test {:deploy :local :groups ["fa-web" "fa-eu"]})
(defhost beta.fleet-a.test {:deploy :local :groups ["fa-web"]}
  (joins "fa-db"))

(defn [(pytest.fixture :autouse True)] only-this-modules-hosts []
  ;; Choosing by group computes every host's hostattrs: leave out the hosts
  ;; other test modules define (some on purpose broken).
  (setv saved (dict hosts)
        mine (dfor [n h] (.items hosts) :if (.endswith n ".fleet-a.test") n h))
  (.clear hosts)
  (.update hosts mine)
  (yield)
  (.clear hosts)
  (.update hosts saved))

(defn test-a-host-whose-groups-cannot-be-known-is-named []
  (make-host "broken.fleet-a.test" {} None (eseqprops (vetoes)))
  (with [e (pytest.raises ConsfigError)]
    (select-hosts ["@fa-web"]))
  (assert (in "cannot tell which groups broken.fleet-a.test is in" (str e.value)) (str e.value)))

(defn names [hosts]
  (lfor h hosts h.hostname))

(defn test-defhost-groups-are-kept-on-the-host []
  (assert (= alpha.groups ["fa-web" "fa-eu"]) alpha.groups))

(defn test-host-groups-add-those-pushed-from-hostattrs []
  (assert (= (host-groups beta) ["fa-web" "fa-db"]) (host-groups beta)))

(defn test-defhost-groups-must-be-a-list-of-names []
  (with [e (pytest.raises ConsfigError)]
    (make-host "bad-groups.fleet-a.test" {:groups "web"} None (eseqprops)))
  (assert (in ":groups is a list of group names" (str e.value)) (str e.value)))

(defn test-terms-joined-by-a-colon-must-all-hold []
  (setv chosen (names (select-hosts ["@fa-web:!@fa-eu"])))
  (assert (= chosen ["beta.fleet-a.test"]) chosen))

(defn test-several-patterns-are-a-union-each-host-once []
  (setv chosen (names (select-hosts ["beta" "*.fleet-a.test" "@fa-db"])))
  (assert (= chosen ["beta.fleet-a.test" "alpha.fleet-a.test"]) chosen))

(defn test-limit-narrows-the-selection []
  (setv chosen (names (select-hosts ["*.fleet-a.test"] "@fa-eu")))
  (assert (= chosen ["alpha.fleet-a.test"]) chosen))

(defn test-an-empty-term-is-an-error []
  (with [e (pytest.raises ConsfigError)]
    (select-hosts ["@fa-web:"]))
  (assert (in "empty term" (str e.value)) (str e.value)))

(defn test-counts-are-numbers-or-percentages-of-the-hosts []
  (assert (= (parse-count "3" 20 "--serial") 3) "a number")
  (assert (= (parse-count "10%" 20 "--serial") 2) "10% of 20")
  (assert (= (parse-count "1%" 20 "--serial") 1) "at least one")
  (assert (is (parse-count None 20 "--serial") None) "none given"))

(defn test-a-count-that-is-not-one-names-the-option []
  (for [bad ["0" "x" "-1"]]
    (with [e (pytest.raises ConsfigError)]
      (parse-count bad 20 "--max-fail"))
    (assert (in "--max-fail" (str e.value)) (str e.value))))
