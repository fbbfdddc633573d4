;; hosts/example.hy loads, and every host in it preprocesses: the arguments
;; fit the properties and the hostattrs compute, on the controller.

(require consfig *)
(import consfig *
        pathlib
        consfig.model.host [hosts]
        consfig.site.load [load-consfig])

(setv EXAMPLE (/ (. (.resolve (pathlib.Path __file__)) parents [2]) "hosts" "example.hy"))

(defn test-example-site-preprocesses []
  (load-consfig (str EXAMPLE))
  (for [name ["athena.example.org" "hermes.example.org"]]
    (assert (in name hosts) f"{name} is not defined by {EXAMPLE}")
    (setv host (preprocess-host (get hosts name))
          oses (get host.hostattrs "os"))
    (assert (= (get oses 0 "suite") "bookworm") (repr oses))
    (assert (all (gfor o oses (= (get o "type") "debian-stable")))
            f"a chroot's OS stays the chroot's: {oses}")
    (assert (get host.hostattrs "apt.mirrors") "mirrors declared")
    (assert (= (read-propspec (hy.repr host.propspec)) host.propspec)
            "the propspec prints and reads back")
    (assert (= (data->propspec (propspec->data host.propspec)) host.propspec)
            "and travels as data")))
