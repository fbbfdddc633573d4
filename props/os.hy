"Operating systems: what a host runs, declared in its propspec.

A host's OS is the hostattr `:os`, a dict such as {\"type\" \"debian-stable\"
\"suite\" \"bookworm\" \"arch\" \"amd64\"}.  Types form a hierarchy
(debian-stable is a debian is a linux), which `required` and `isa?` follow."

(eval-when-compile (require consfig.model.property [defprop]))
(import hy.models [Keyword]
        consfig.apply.actions [NO-CHANGE]
        consfig.apply.engine [apply-propapp unapply-propapp]
        consfig.model.host [push-hostattr get-hostattr inapplicable]
        consfig.model.property [Propapp propapp-desc propapp-hostattrs]
        consfig.util [keyword-name]
        consfig.types *)

(setv arch (enum "amd64" "arm64" "armel" "armhf" "i386" "mips64el" "ppc64el" "riscv64" "s390x")
      suite (matching "suite" "a Debian suite or codename (lower-case letters, digits and -)"
                      r"[a-z][a-z0-9-]*")
      case-pairs (predicate "case-pairs" "alternating keys and propapps, such as :debian (apt.installed \"x\")"
                       (fn [cases] (and (not (% (len cases) 2))
                                        (all (gfor p (cut cases 1 None 2) (isinstance p Propapp)))))))

(setv HIERARCHY {"linux" None
                 "debian" "linux"
                 "debian-stable" "debian"
                 "debian-testing" "debian"
                 "debian-unstable" "debian"})

(defn _name [x]
  (or (keyword-name x) (str x)))

(defn isa? [os-value type]
  "Whether the OS described by OS-VALUE is of TYPE or a subtype of it."
  (setv wanted (_name type)
        t (and os-value (.get os-value "type")))
  (while t
    (when (= t wanted) (return True))
    (setv t (.get HIERARCHY t)))
  False)

(defn required [type]
  "From a :hostattrs subroutine: veto the host unless its OS is a TYPE."
  (setv os-value (get-hostattr "os"))
  (when (not (isa? os-value type))
    (inapplicable
      (if os-value
          f"this property needs an OS of type {(_name type)}, but the host runs {(get os-value "type")}"
          f"this property needs an OS of type {(_name type)}; declare the host's OS, e.g. (os.debian-stable \"bookworm\" :amd64)"))))

(defn _declare [type arch #** more]
  (push-hostattr "os" {"type" type "arch" (_name arch) #** more}))

(defprop linux :posix [#^ arch arch]
  "The host runs some Linux on ARCH."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"Linux ({(_name arch)})")
  (:hostattrs (_declare "linux" arch))
  (:unapply NO-CHANGE))

(defprop debian-stable :posix [#^ suite suite #^ arch arch]
  "The host runs Debian stable, whose codename is SUITE, on ARCH."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"Debian stable ({suite}, {(_name arch)})")
  (:hostattrs (_declare "debian-stable" arch :suite suite))
  (:unapply NO-CHANGE))

(defprop debian-testing :posix [#^ arch arch]
  "The host runs Debian testing on ARCH."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"Debian testing ({(_name arch)})")
  (:hostattrs (_declare "debian-testing" arch :suite "testing"))
  (:unapply NO-CHANGE))

(defprop debian-unstable :posix [#^ arch arch]
  "The host runs Debian unstable on ARCH."
  (:unwatched "a declaration for the controller (a hostattr): nothing on the target to keep")
  (:desc f"Debian unstable ({(_name arch)})")
  (:hostattrs (_declare "debian-unstable" arch :suite "unstable"))
  (:unapply NO-CHANGE))

(defn _cases [cases]
  "CASES, alternating keys and propapps, as a list of pairs."
  (list (zip (cut cases 0 None 2) (cut cases 1 None 2))))

(defn _otherwise? [key]
  (in (_name key) #("t" "otherwise")))

(defn _choose-type [cases]
  (setv os-value (get-hostattr "os"))
  (for [[key propapp] (_cases cases)]
    (when (or (_otherwise? key) (isa? os-value key))
      (return propapp)))
  None)

(defn _choose-suite [cases]
  (setv os-value (get-hostattr "os")
        suite (and os-value (.get os-value "suite")))
  (for [[key propapp] (_cases cases)]
    (when (or (and (isinstance key Keyword) (_otherwise? key))
              (if (isinstance key #(list tuple)) (in suite key) (= suite key)))
      (return propapp)))
  None)

(defn _os-description []
  (setv os-value (get-hostattr "os"))
  (if os-value
      (.join " " (gfor k #("type" "suite" "arch") :if (in k os-value) (str (get os-value k))))
      "undeclared"))

(defn _hostattrs-of [chosen kind]
  (cond chosen (propapp-hostattrs chosen)
        (= kind "etypecase")
        (inapplicable f"the host's OS ({(_os-description)}) matches no case of os.etypecase")))

(defn _desc-of [chosen]
  (if chosen (propapp-desc chosen) f"no case for this OS ({(_os-description)})"))

(defn _apply-chosen [chosen]
  (if chosen (apply-propapp chosen) NO-CHANGE))

(defn _unapply-chosen [chosen]
  (if chosen (unapply-propapp chosen) NO-CHANGE))

(defprop typecase :posix [#^ (one-of keyword propspec) #* cases]
  "Apply the propapp of the first of CASES whose OS type the host's OS is:
CASES alternate an OS type and a propapp,

  (os.typecase :debian-stable (apt.installed \"foo\")
               :debian (apt.installed \"foo-ng\")
               :otherwise (cmd.single \"true\"))

An OS that matches no case gets nothing.  Declare the OS earlier in the
propspec than the typecase."
  (:unwatched "it chooses a propspec by the host's OS; the chosen properties are watched")
  (:desc (_desc-of (_choose-type cases)))
  ;; The chosen propapp is checked in check mode as it would be applied.
  (:simulates True)
  (:invariant (.accepts case-pairs cases) (+ "cases must be " case-pairs.phrase))
  (:hostattrs (_hostattrs-of (_choose-type cases) "typecase"))
  (:apply (_apply-chosen (_choose-type cases)))
  (:unapply (_unapply-chosen (_choose-type cases))))

(defprop etypecase :posix [#^ (one-of keyword propspec) #* cases]
  "Like `typecase`, but a host whose OS matches no case is refused when its
hostattrs are computed, before anything is applied."
  (:unwatched "it chooses a propspec by the host's OS; the chosen properties are watched")
  (:desc (_desc-of (_choose-type cases)))
  ;; The chosen propapp is checked in check mode as it would be applied.
  (:simulates True)
  (:invariant (.accepts case-pairs cases) (+ "cases must be " case-pairs.phrase))
  (:hostattrs (_hostattrs-of (_choose-type cases) "etypecase"))
  (:apply (_apply-chosen (_choose-type cases)))
  (:unapply (_unapply-chosen (_choose-type cases))))

(defprop debian-suite-case :posix [#^ (one-of suite (list-of suite) keyword propspec) #* cases]
  "Apply the propapp of the first of CASES naming the host's Debian suite:
CASES alternate a suite (a string such as \"bookworm\" or \"unstable\", or a
list of them, or `:otherwise`) and a propapp.  A suite matching no case gets
nothing."
  (:unwatched "it chooses a propspec by the host's suite; the chosen properties are watched")
  (:desc (_desc-of (_choose-suite cases)))
  ;; The chosen propapp is checked in check mode as it would be applied.
  (:simulates True)
  (:invariant (.accepts case-pairs cases) (+ "cases must be " case-pairs.phrase))
  (:hostattrs (_hostattrs-of (_choose-suite cases) "debian-suite-case"))
  (:apply (_apply-chosen (_choose-suite cases)))
  (:unapply (_unapply-chosen (_choose-suite cases))))

(export :objects [HIERARCHY isa? required linux debian-stable debian-testing
                  debian-unstable typecase etypecase debian-suite-case])
