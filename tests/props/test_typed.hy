;; Every parameter of every library property has a type.

(import importlib
        pathlib [Path]
        consfig.model.property [properties]
        consfig.types [annotation-type])

(setv PROPS (/ (. (Path __file__) parent parent parent) "props"))

(defn test-every-library-parameter-is-typed []
  (for [f (.glob PROPS "*.hy")]
    (importlib.import-module (+ "consfig.props." f.stem)))
  (setv untyped (lfor [name prop] (.items properties)
                      :if (.startswith name "consfig.props.")
                      p (.values prop.signature.parameters)
                      :if (is (annotation-type p.annotation) None)
                      f"{prop.short-name} {p.name}"))
  (assert (> (len (lfor n properties :if (.startswith n "consfig.props.") n)) 50) "the library was loaded")
  (assert (not untyped) (+ "untyped parameters: " (.join ", " untyped))))
