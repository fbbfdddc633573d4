"Properties for test_deployment.hy, in a module of their own, imported as
the top-level module `deployment_testprops`: a nested deployment over a
:python hop ships the module of each property it applies, and a module that
imports pytest cannot be imported on a target that has no pytest (Debian's
python3, say)."

(require consfig *)
(import consfig *)

(setv log [])

(defprop logged :posix [name]
  "Record NAME and the host it is applied to."
  (:desc name)
  (:apply (.append log #(name (get-hostname) (get-parent-hostattrs "hostname")))))

(defprop debian-only :posix []
  "Only for Debian hosts."
  (:hostattrs (hy.I.consfig/props/os.required "debian")))
