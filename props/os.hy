"Operating systems: what a host runs, declared in its propspec.

A host's OS is the hostattr `:os`, a dict such as {\"type\" \"debian-stable\"
\"suite\" \"bookworm\" \"arch\" \"amd64\"}.  Types form a hierarchy
(debian-stable is a debian is a linux), which `required` and `isa?` follow."

(require consfig.property [defprop])
(import hy.models [Keyword]
        consfig.host [push-hostattr get-hostattr get-hostname inapplicable])

(setv HIERARCHY {"linux" None
                 "debian" "linux"
                 "debian-stable" "debian"
                 "debian-testing" "debian"
                 "debian-unstable" "debian"})

(defn _name [x]
  (if (isinstance x Keyword) x.name (str x)))

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

(defprop linux :posix [arch]
  "The host runs some Linux on ARCH."
  (:desc f"Linux ({(_name arch)})")
  (:hostattrs (_declare "linux" arch)))

(defprop debian-stable :posix [suite arch]
  "The host runs Debian stable, whose codename is SUITE, on ARCH."
  (:desc f"Debian stable ({suite}, {(_name arch)})")
  (:hostattrs (_declare "debian-stable" arch :suite suite)))

(defprop debian-testing :posix [arch]
  "The host runs Debian testing on ARCH."
  (:desc f"Debian testing ({(_name arch)})")
  (:hostattrs (_declare "debian-testing" arch :suite "testing")))

(defprop debian-unstable :posix [arch]
  "The host runs Debian unstable on ARCH."
  (:desc f"Debian unstable ({(_name arch)})")
  (:hostattrs (_declare "debian-unstable" arch :suite "unstable")))

(export :objects [HIERARCHY isa? required linux debian-stable debian-testing
                  debian-unstable])
