;; The deployment context: the current host and connection, and connattrs.

(import consfig.transport.local [LocalConnection]
        consfig.model.context [applying connection current-host parent-host
                               get-connattr set-connattr forget-connattr]
        consfig.errors [ConsfigError]
        consfig.model.host [Host get-hostname])

(defn test-applying-sets-host-connection-and-parent-and-restores-them []
  (setv a (Host "a.example" None)
        b (Host "b.example" None)
        c1 (LocalConnection)
        c2 (LocalConnection))
  (with [(applying a c1)]
    (with [(applying b c2 :parent a)]
      (assert (= (get-hostname) "b.example") "inner host")
      (assert (is (connection) c2) "inner connection")
      (assert (is (.get parent-host) a) "parent"))
    (assert (= (get-hostname) "a.example") "outer host back")
    (assert (is (connection) c1) "outer connection back")
    (assert (is (.get parent-host) None) "no parent at the top"))
  (assert (is (.get current-host None) None) "nothing outside"))

(defn test-applying-without-a-connection-keeps-the-current-one []
  (setv c (LocalConnection))
  (with [(applying (Host "a.example" None) c)]
    (with [(applying (Host "b.example" None))]
      (assert (is (connection) c) "kept"))))

(defn test-no-connection-outside-a-deployment-is-a-clear-error []
  (try (connection)
       (except [e ConsfigError] (assert (in "no connection" (str e)) (str e)))
       (else (assert False "must raise"))))

(defn test-connattrs-live-on-the-connection []
  (setv c1 (LocalConnection) c2 (LocalConnection))
  (with [(applying (Host "a.example" None) c1)]
    (assert (is (get-connattr "cache") None) "unset is None")
    (assert (= (get-connattr "cache" 5) 5) "or the default")
    (set-connattr "cache" [1 2])
    (assert (= (get-connattr ':cache) [1 2]) "a quoted keyword names the same key"))
  (with [(applying (Host "a.example" None) c2)]
    (assert (is (get-connattr "cache") None) "another connection has its own"))
  (with [(applying (Host "a.example" None) c1)]
    (assert (= (get-connattr "cache") [1 2]) "kept for the connection's life")
    (forget-connattr "cache")
    (assert (is (get-connattr "cache") None) "forgotten")))
