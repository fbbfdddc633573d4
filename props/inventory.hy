"Facts about a host as data: what `consfig facts HOST [FACT…]` prints.

  consfig facts web1                   every fact below, as JSON
  consfig facts web1 os packages      just those
  consfig facts web1 '(fact.unit-active \"nginx.service\")'   a fact of the library: true or false

The facts, each read over the host's chain with the ordinary tools of a
Debian system (a fact whose tool is missing is null):

  hostname      the kernel's node name (`uname -n`)
  os            /etc/os-release as a dict (`id`, `version_id`, `version_codename`, …)
  kernel        `uname`: `name`, `release`, `version`, `machine`
  architecture  dpkg's (`dpkg --print-architecture`)
  memory        /proc/meminfo's totals in kB: `total`, `available`, `swap_total`
  addresses     each interface's addresses with their prefix (`ip -j addr`)
  packages      the installed packages and their versions (`dpkg-query`)
  units         each systemd unit's `load`, `active` and `sub` states
                (null where systemd is not running)

`inventory.reported` gathers them and sends them as a `facts` event, which
`consfig facts` collects (and `--json` writes); it changes nothing."

(eval-when-compile (require consfig.model.property [defprop]))
(import json
        re
        consfig.apply.actions [NO-CHANGE Script run]
        consfig.apply.engine [emit]
        consfig.model.fact [fact-application fact-holds? fact-hostattrs]
        consfig.types *)

(defn _out [#* cmd]
  ;; The standard output of CMD, or None when it cannot be run or fails.
  (setv r (run #* cmd :check False :timeout 120))
  (when r.ok? r.stdout))

(defn _os-release []
  (setv text (_out "cat" "/etc/os-release"))
  (when (is text None) (setv text (_out "cat" "/usr/lib/os-release")))
  (when (is-not text None)
    (dfor [k v] (re.findall r"^([A-Za-z0-9_]+)=(.*)$" text re.M)
          (.lower k) (.replace (.strip v "\"'") "\\\"" "\""))))

(defn _kernel []
  (setv fields (lfor flag ["-s" "-r" "-v" "-m"] (_out "uname" flag)))
  (when (all (gfor f fields (is-not f None)))
    (dict (zip ["name" "release" "version" "machine"] (gfor f fields (.strip f))))))

(defn _stripped [text] (when (is-not text None) (or (.strip text) None)))

(defn _memory []
  (setv text (_out "cat" "/proc/meminfo"))
  (when (is-not text None)
    (setv fields (dict (re.findall r"^(\w+):\s+(\d+)" text re.M)))
    (dfor [k name] [["total" "MemTotal"] ["available" "MemAvailable"] ["swap_total" "SwapTotal"]]
          :if (in name fields)
          k (int (get fields name)))))

(defn _addresses []
  (setv text (_out "ip" "-j" "addr" "show"))
  (when (is-not text None)
    (dfor i (json.loads text)
          (get i "ifname") (lfor a (.get i "addr_info" [])
                                 f"{(get a "local")}/{(get a "prefixlen")}"))))

(defn _packages []
  (setv text (_out "dpkg-query" "-W" "-f" "${db:Status-Abbrev}\t${binary:Package}\t${Version}\n"))
  (when (is-not text None)
    (dfor line (.splitlines text)
          :setv parts (.split line "\t")
          :if (and (= (len parts) 3) (.startswith (get parts 0) "ii"))
          (get parts 1) (get parts 2))))

;; Units only where systemd runs: `systemctl` in a chroot would answer for
;; nothing, or for the machine the chroot is on.
(setv _UNITS "[ -d /run/systemd/system ] || exit 3
exec systemctl list-units --all --plain --no-legend --no-pager --full")

(defn _units []
  (setv r (run (Script _UNITS) :check False :timeout 120))
  (when r.ok?
    (dfor line (.splitlines r.stdout)
          :setv w (.split line)
          :if (>= (len w) 4)
          (get w 0) {"load" (get w 1) "active" (get w 2) "sub" (get w 3)})))

(setv GATHERERS {"hostname" (fn [] (_stripped (_out "uname" "-n")))
                 "os" _os-release
                 "kernel" _kernel
                 "architecture" (fn [] (_stripped (_out "dpkg" "--print-architecture")))
                 "memory" _memory
                 "addresses" _addresses
                 "packages" _packages
                 "units" _units})

(setv fact-name (Type "fact-name" (+ "the name of a fact: " (.join ", " GATHERERS))
                      (fn [v] (in v GATHERERS))))

(defn facts-event [facts]
  "The event that carries FACTS (a dict, name → value) back."
  {"event" "facts" "facts" facts})

(defn gather [names facts]
  "The dict of each fact NAMES names (all of them when there are neither
NAMES nor FACTS), and of each fact application of FACTS, by its printed
form: true or false."
  (setv names (if (or names facts) names (list GATHERERS)))
  {#** (dfor n names n ((get GATHERERS n)))
   #** (dfor f facts (repr f) (fact-holds? f))})

(defprop reported :posix [#^ (list-of fact-name) [names []] #^ (list-of fact-application) [facts []]]
  "Gather the facts NAMES (all of them when neither NAMES nor FACTS is
given; see `consfig.props.inventory`) and whether each fact application of
FACTS holds, and send them back as data (a `facts` event).  Changes
nothing; an action by nature (it reports, and holds nothing to keep)."
  (:desc (+ "Facts: " (.join ", " [#* names #* (map repr facts)] ) (if (or names facts) "" "all")))
  ;; FACTS are read, never applied.
  (:children [])
  (:opaque-type True)
  (:simulates True)
  (:hostattrs (for [f facts] (fact-hostattrs f)))
  (:apply (emit (facts-event (gather names facts)))
          NO-CHANGE))

(export :objects [reported gather facts-event fact-name GATHERERS])
