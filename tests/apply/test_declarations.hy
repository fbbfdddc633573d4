;; A combinator says what it is (consfig.model.property's DECLARATIONS); the
;; engine, meta-parameters, `during` and the agent ask it, so a combinator a
;; site defines behaves as the library's do without an edit to either.

(require consfig *)
(import consfig *
        pytest
        consfig.converge.agent [leaves watches-of]
        consfig.model.property [children fact-of handler-of inverts? retractable? sequence?
                                trigger-of])
(use-props consfig.props [cmd file fact])

(defprop after-changing :posix [propapp #* then]
  "A site's own on-change: it says which propapp sets off the others."
  (:simulates True)
  (:trigger propapp)
  (:apply (apply-propapp propapp)))

(defprop patiently :posix [#* propapps]
  "A site's own with-meta: its propapps under :retry 2."
  (:simulates True)
  (:announce False)
  (:meta {"retry" 2})
  (:apply (apply-sequence propapps)))

(defprop in-order :posix [#* propapps]
  "A site's own sequence."
  (:simulates True)
  (:announce False)
  (:sequence True)
  (:apply (apply-sequence propapps))
  (:unapply (apply-sequence propapps :unapply True)))

(setv a (file.exists-with-content "/tmp/a" "a\n")
      b (file.exists-with-content "/tmp/b" "b\n"))

(defn test-the-core-combinators-declare-what-they-are []
  (assert (sequence? (eseqprops a b)) "eseqprops is a sequence")
  (assert (sequence? (desc "d" a)) "desc is a sequence of one")
  (assert (not (sequence? (eseqprops-until :failed-change a))) "eseqprops-until is not opened up")
  (assert (inverts? (unapplied a)) "unapplied inverts")
  (assert (= (trigger-of (on-change a b)) a) "on-change is set off by its first propapp")
  (assert (is (trigger-of (eseqprops a b)) None) "eseqprops is no trigger")
  (assert (= (fact-of (during (fact.file-exists "/x") a)) (fact.file-exists "/x")) "a during's fact")
  (assert (= (handler-of (handler "h" a)) "h") "a handler's name")
  (assert (= (children (with-unapply a (hy.models.Keyword "unapply") b)) [a])
          "with-unapply applies what precedes :unapply")
  (assert (retractable? (with-unapply a (hy.models.Keyword "unapply") b))
          "a with-unapply with an :unapply of its own undoes itself")
  (assert (not (retractable? (with-unapply a b))) "one without it does not"))

(defn test-a-sites-trigger-is-kept-whole-by-the-agent []
  (setv p (after-changing a (cmd.single "true"))
        found (leaves (eseqprops p b)))
  (assert (= (lfor [q _ _] found q) [p b]) f"the trigger whole, then b: {found}")
  (assert (= (watches-of p) [["path" "/tmp/a"]]) "it watches what sets it off"))

(defn test-a-sites-meta-combinator-sets-the-meta-parameters-of-its-leaves []
  (setv found (effective-meta (eseqprops (patiently a) b)))
  (assert (= found [[a {"retry" 2}] [b {}]]) f"a under :retry 2, b under none: {found}"))

(defn test-reverse-looks-into-a-sites-sequence-for-what-cannot-be-unapplied []
  (setv host (make-host "declarations.example" None None
                        (propapp (with-meta {:reverse True} (in-order a (cmd.single "true"))))))
  (with [e (pytest.raises PropspecError)]
    (deploy* [:local] host :sink (fn [e] None)))
  (assert (in "cmd.single has no :unapply" (str e.value)) (str e.value)))
