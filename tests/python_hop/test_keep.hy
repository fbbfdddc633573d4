;; Which deployments keep their chain (`consfig.python_hop.keep`), for how long, and
;; that the deploy macros take :persist; the kept chains themselves are
;; tested over the SSH lab (tests/connections/test_kept_chains.py).

(require consfig *)
(import consfig *
        consfig.python_hop.keep [idle-limit keepable? IDLE-LIMIT]
        consfig.python_hop.keep)
(use-props consfig.props [file])

(defn hops [#* names] (lfor n names #(n {})))

(defn test-chains-with-python-or-of-ssh-and-user-hops-are-kept []
  (assert (keepable? (hops "ssh" "sudo" "python")) "a :python chain")
  (assert (keepable? (hops "local" "python")) "a local :python chain")
  (assert (keepable? (hops "ssh" "sudo")) "ssh then a user hop")
  (assert (keepable? (hops "ssh" "ssh" "su")) "ssh through a bastion")
  (assert (not (keepable? (hops "local"))) "nothing to keep on the controller")
  (assert (not (keepable? (hops "ssh" "chroot"))) "a POSIX chain into a chroot is not kept"))

(defn test-persist-says-for-how-long [monkeypatch]
  (assert (= (idle-limit True) IDLE-LIMIT 300) "True: the documented five minutes")
  (assert (= (idle-limit 7) 7) "a number of seconds")
  (assert (is (idle-limit False) None) "False: not kept")
  (assert (is (idle-limit None) None) "unset, outside the REPL: not kept")
  (.setattr monkeypatch consfig.python_hop.keep "persist_by_default" True)
  (assert (= (idle-limit None) IDLE-LIMIT) "unset, in the REPL: kept")
  (assert (is (idle-limit False) None) "the REPL's default can be refused"))

(defhost keep-test.local {:deploy :local}
  "A host deployed over a chain there is nothing to keep of.")

(defn test-the-deploy-macros-take-persist-as-an-option [tmp-path]
  (setv path (str (/ tmp-path "f"))
        outcome (deploy-these :local keep-test.local :persist 60 :sink (fn [e] None)
                              (file.has-content path "x\n")))
  (assert (= outcome.status "changed") outcome)
  (assert (= (kept-chains) []) "a :local chain is not kept"))
