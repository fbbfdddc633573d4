(require consfig *)
(import consfig *
        consfig.deployer.deployment [deploy*]
        consfig.errors [ConsfigError])

(defprop in-python :python []
  "A property that needs a Python on the target."
  (:desc "in python")
  (:apply None))

(defn test-python-property-over-ssh-is-refused-before-connecting []
  ;; The host name cannot resolve: a connection attempt would fail otherwise.
  (setv host (hy.I.consfig/model/host.make-host "unreachable.invalid" None None (eseqprops)))
  (for [chain [[:ssh] [[:ssh :host "unreachable.invalid"] :sudo] [:local :sudo]]]
    (try
      (deploy* chain host :propspec (in-python) :sink (fn [e] None))
      (assert False f"{(hy.repr chain)} was not refused")
      (except [e ConsfigError]
        (assert (in "in-python: property of type :python" (str e)) (str e))
        (assert (in "Add a :python hop" (str e)) (str e))))))
