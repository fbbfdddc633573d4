(require consfig *)
(import consfig *)

(defn test-collector-runs-hy-tests []
  (assert (= (hy.repr (eseqprops)) "(consfig.combinators.eseqprops)") "collector"))
