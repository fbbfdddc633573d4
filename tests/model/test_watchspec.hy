;; Watch specs (consfig.model.watchspec): what a property's :watch returns,
;; as plain data, and what is refused before anything is watched.  The
;; Watcher that acts on them is tested in tests/converge/test_watch.hy.

(import json
        pytest
        consfig.errors [PropspecError]
        consfig.model.watchspec [watch-path watch-unit watch-dpkg watch-poll check-watch-specs])

(defn refusal [spec]
  ;; The message check-watch-specs gives for SPEC, said of "the-prop".
  (with [e (pytest.raises PropspecError)]
    (check-watch-specs [spec] "the-prop"))
  (str e.value))

(defn test-each-kind-of-watch-is-a-plain-list []
  (assert (= (watch-path "/etc/motd") ["path" "/etc/motd"]) "a path")
  (assert (= (watch-unit "nginx.service") ["unit" "nginx.service"]) "a unit")
  (assert (= (watch-dpkg) ["dpkg"]) "dpkg")
  (assert (= (watch-poll 60) ["poll" 60]) "a poll")
  (assert (= (watch-poll 0.5) ["poll" 0.5]) "a poll of half a second"))

(defn test-watch-specs-survive-json-unchanged []
  (setv specs [(watch-path "/etc/caf\u00e9 x") (watch-unit "a@b.service") (watch-dpkg) (watch-poll 2.5)])
  (assert (= (json.loads (json.dumps specs)) specs) "they travel to the target as JSON"))

(defn test-a-relative-path-is-refused-saying-to-watch-an-absolute-one []
  (with [e (pytest.raises PropspecError)]
    (watch-path "etc/motd"))
  (assert (in "'etc/motd'" (str e.value)) (str e.value))
  (assert (in "watch an absolute path" (str e.value)) (str e.value)))

(defn test-a-path-with-a-nul-is-refused []
  (with [e (pytest.raises PropspecError)]
    (watch-path "/etc/\x00motd"))
  (assert (in "NUL" (str e.value)) (str e.value)))

(defn test-a-path-that-is-not-text-is-refused []
  (for [bad [b"/etc/motd" None 3]]
    (with [e (pytest.raises PropspecError)]
      (watch-path bad))
    (assert (in "one path" (str e.value)) (str e.value))))

(defn test-a-path-with-newlines-and-odd-bytes-is-watched-as-given []
  (assert (= (watch-path "/tmp/a\nb \udcff$(x)") ["path" "/tmp/a\nb \udcff$(x)"])
          "any absolute path a file can have"))

(defn test-a-unit-name-that-could-be-an-option-or-a-path-is-refused []
  (for [bad ["-x.service" "--user" "a b.service" "a\nb.service" "a\tb" "../x.service" "a/b" "\x00"]]
    (with [e (pytest.raises PropspecError)]
      (watch-unit bad))
    (assert (in "is not a unit name" (str e.value)) f"{bad !r}: {e.value}")))

(defn test-an-empty-or-missing-unit-name-is-refused []
  (for [bad ["" None 5]]
    (with [e (pytest.raises PropspecError)]
      (watch-unit bad))
    (assert (in "one unit name" (str e.value)) f"{bad !r}: {e.value}")))

(defn test-a-poll-takes-a-number-of-seconds-above-zero []
  (for [bad [0 -1 -0.5 True False "60" None]]
    (with [e (pytest.raises PropspecError)]
      (watch-poll bad))
    (assert (in "above 0" (str e.value)) f"{bad !r}: {e.value}")))

(defn test-a-dpkg-watch-takes-no-argument []
  (assert (in "takes no argument" (refusal ["dpkg" "/var/lib/dpkg/status"])) "refused"))

(defn test-a-path-or-unit-watch-takes-exactly-one-argument []
  (assert (in "one path" (refusal ["path"])) "none")
  (assert (in "one path" (refusal ["path" "/a" "/b"])) "two")
  (assert (in "one unit name" (refusal ["unit" "a.service" "b.service"])) "two units")
  (assert (in "above 0" (refusal ["poll" 1 2])) "two numbers"))

(defn test-an-unknown-kind-is-refused-naming-the-kinds-there-are []
  (setv text (refusal ["inotify" "/etc"]))
  (assert (in "'inotify'" text) text)
  (assert (in "path, unit, dpkg, poll" text) text))

(defn test-a-spec-that-is-not-a-list-naming-its-kind-is-refused []
  (for [bad ["path" [] [1 2] {"path" "/etc"} None]]
    (assert (in "first item names its kind" (refusal bad)) (repr bad))))

(defn test-checked-specs-come-back-as-lists []
  (assert (= (check-watch-specs [#("path" "/etc/motd") ["dpkg"]]) [["path" "/etc/motd"] ["dpkg"]])
          "tuples become lists")
  (assert (= (check-watch-specs #()) []) "none at all is fine"))

(defn test-a-watch-that-is-not-a-list-of-specs-is-refused-naming-the-property []
  (for [bad [None "path" {"path" "/etc"}]]
    (with [e (pytest.raises PropspecError)]
      (check-watch-specs bad "file.has-content"))
    (assert (.startswith (str e.value) "file.has-content: ") (str e.value))
    (assert (in "must return a list of watch specs" (str e.value)) (str e.value))))

(defn test-a-bad-spec-is-refused-naming-the-property []
  (assert (.startswith (refusal ["path" "rel"]) "the-prop: ") "the given name")
  (with [e (pytest.raises PropspecError)]
    (check-watch-specs [["dpkg"] ["poll" 0]]))
  (assert (.startswith (str e.value) "a property: ") f"else a property: {e.value}"))
