;; OS declarations and the combinators that choose by them.

(require consfig *)
(import consfig *
        os.path [exists]
        pytest
        consfig.errors [InapplicableProperty PropspecError]
        proptest [LOCAL apply-twice checks-clean deploy-propspec unapply])
(use-props consfig.props [os file])

(defn slurp [p] (with [f (open p)] (.read f)))

(defn hostattrs-of [propspec]
  (. (preprocess-host (make-host "os-test.invalid" None None propspec)) hostattrs))

(defn test-declarations-push-os []
  (setv attrs (hostattrs-of (propapp (os.debian-stable "bookworm" :amd64))))
  (assert (= (get attrs "os") [{"type" "debian-stable" "arch" "amd64" "suite" "bookworm"}])
          (repr attrs))
  (assert (os.isa? (get attrs "os" 0) "debian") "debian-stable is a debian")
  (assert (os.isa? (get attrs "os" 0) "linux") "and a linux")
  (assert (not (os.isa? (get attrs "os" 0) "debian-unstable")) "not unstable"))

(defn test-other-declarations-apply-as-nothing-and-check-clean []
  ;; The library walk declares Debian stable; these are applied here.
  (setv decls (props (os.debian-testing :amd64) (os.debian-unstable :amd64) (os.linux :amd64)))
  (apply-twice LOCAL decls :changes False)
  (checks-clean LOCAL decls)
  None)

(defn test-declaration-unapplies-to-nothing []
  (setv #(o _) (deploy-propspec LOCAL (propapp (os.debian-unstable :arm64)) :unapply True))
  (assert (= o.status "no-change") "nothing to undo"))

(defn choice [tmp-path]
  (propapp (os.typecase :debian-stable (file.has-content (str (/ tmp-path "which")) "stable\n")
                        :debian (file.has-content (str (/ tmp-path "which")) "debian\n"))))

(defn test-typecase-picks-first-matching-type [tmp-path]
  (apply-twice LOCAL (props (os.debian-unstable :amd64) (choice tmp-path)))
  (assert (= (slurp (/ tmp-path "which")) "debian\n") "unstable is a debian")
  (apply-twice LOCAL (props (os.debian-stable "bookworm" :amd64) (choice tmp-path)))
  (assert (= (slurp (/ tmp-path "which")) "stable\n") "stable matches first"))

(defn test-typecase-is-printable-data [tmp-path]
  (setv p (propapp (os.typecase :debian-stable (file.has-content "/x" "y") :otherwise (file.does-not-exist "/x"))))
  (assert (= (hy.repr p)
             (+ "(consfig.props.os.typecase :debian-stable (consfig.props.file.has-content \"/x\" \"y\") "
                ":otherwise (consfig.props.file.does-not-exist \"/x\"))"))
          (hy.repr p))
  (assert (= (read-propspec (hy.repr p)) p) "reads back")
  (assert (= (data->propspec (propspec->data p)) p) "travels as data"))

(defn test-typecase-without-match-does-nothing [tmp-path]
  (setv #(o _) (deploy-propspec LOCAL (props (os.linux :amd64) (choice tmp-path))))
  (assert (= o.status "no-change") "nothing chosen")
  (assert (not (exists (/ tmp-path "which"))) "nothing applied"))

(defn test-etypecase-refuses-unmatched-os [tmp-path]
  (with [e (pytest.raises InapplicableProperty)]
    (hostattrs-of (props (os.linux :amd64)
                         (os.etypecase :debian (file.has-content "/x" "y")))))
  (assert (in "matches no case of os.etypecase" (str e.value)) (str e.value)))

(defn test-typecase-runs-hostattrs-of-chosen-case-only []
  (setv attrs (hostattrs-of (props (os.debian-stable "bookworm" :amd64)
                                   (os.typecase :debian-unstable (os.linux :i386)
                                                :debian (os.linux :arm64)))))
  (assert (= (get attrs "os" 0 "arch") "arm64") (repr attrs)))

(defn test-typecase-rejects-malformed-cases []
  (with [e (pytest.raises PropspecError)]
    (hostattrs-of (propapp (os.typecase :debian))))
  (assert (in "alternating" (str e.value)) (str e.value)))

(defn test-debian-suite-case [tmp-path]
  (setv f (str (/ tmp-path "suite"))
        p (propapp (os.debian-suite-case "bullseye" (file.has-content f "old\n")
                                         ["bookworm" "trixie"] (file.has-content f "new\n")
                                         :otherwise (file.has-content f "other\n"))))
  (apply-twice LOCAL (props (os.debian-stable "trixie" :amd64) p))
  (assert (= (slurp f) "new\n") "list of suites")
  (apply-twice LOCAL (props (os.debian-unstable :amd64) p))
  (assert (= (slurp f) "other\n") "otherwise")
  (unapply LOCAL (props (os.debian-stable "bullseye" :amd64) (os.debian-suite-case "bullseye" (file.exists-with-content f "x"))))
  (assert (not (exists f)) "unapply goes to the chosen case"))
