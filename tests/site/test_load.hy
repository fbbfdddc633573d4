;; consfig.site.load: a site's compiled code is trusted only for the same
;; source compiled by the same consfig (`compiler-identity`).

(import os
        importlib.util
        consfig.site.load :as load)

(defn identity-after-touching [path]
  ;; The compiler's identity once PATH's mtime moved on by a second (and
  ;; the mtime put back afterwards).
  (setv st (os.stat path))
  (setv load._compiler-identity None)
  (try
    (os.utime path :ns #(st.st-atime-ns (+ st.st-mtime-ns 1000000000)))
    (load.compiler-identity)
    (finally
      (os.utime path :ns #(st.st-atime-ns st.st-mtime-ns))
      (setv load._compiler-identity None))))

(defn module-file [name]
  (. (importlib.util.find-spec name) origin))

(defn test-the-identity-is-the-same-while-nothing-changes []
  (setv load._compiler-identity None)
  (setv first (load.compiler-identity))
  (setv load._compiler-identity None)
  (assert (= first (load.compiler-identity)) "computed twice, the same"))

(defn test-a-change-to-a-macro-module-in-a-layer-package-changes-the-identity []
  ;; defprop's expansion comes from consfig/model/property.hy: a site
  ;; compiled before it changed must be compiled again.
  (setv load._compiler-identity None)
  (setv before (load.compiler-identity))
  (assert (!= before (identity-after-touching (module-file "consfig.model.property")))
          "consfig/model/property.hy is part of the identity"))

(defn test-a-change-to-a-property-module-changes-the-identity []
  (setv load._compiler-identity None)
  (setv before (load.compiler-identity))
  (assert (!= before (identity-after-touching (module-file "consfig.props.file")))
          "props/file.hy is part of the identity"))

(defn test-a-change-to-hyrule-changes-the-identity []
  ;; Its macros expand in sites too.
  (setv spec (importlib.util.find-spec "hyrule"))
  (setv hy-file (next (gfor d spec.submodule-search-locations
                            f (sorted (os.listdir d)) :if (.endswith f ".hy")
                            (os.path.join d f))))
  (setv load._compiler-identity None)
  (setv before (load.compiler-identity))
  (assert (!= before (identity-after-touching hy-file)) f"{hy-file} is part of the identity"))
