"Hosts and hostattrs.

A host is a hostname, a propspec and, once preprocessed, its hostattrs: a
mapping of attribute name → list of values, newest first.  `defhost` defines a
host; the hostattrs API (`push-hostattr`, `get-hostattr`, …) is what
`:hostattrs` subroutines use on the controller, and what `:check`/`:apply`
subroutines read on the target.

On the controller, a property's `:hostattrs` and a defpropspec's body may
also read the hostattrs of the other hosts the site defines:
`(get-hostattrs \"db1.example.org\" \"ip\")`, `(hosts-with-hostattr
\"ssh-host-key\")`, `(hosts-in-group \"web\")`.  Reading a host computes its
hostattrs first, once per preparation (`site-facts-scope`).  Hosts may read
each other — every host's known_hosts lists every host's key — as long as
what one reads does not itself depend on what the other reads: a host still
being computed is read as its hostattrs without the properties that read
other hosts, and once everything is computed each such read is checked
against the host's complete hostattrs.  A difference is a cycle, an error
naming the hosts in it, raised before any connection."

(import contextlib
        contextvars
        copy
        re
        sys
        hy.models [Dict String Symbol]
        consfig.model.context [applying current-host parent-host]
        consfig.errors [ConsfigError DeferredRead InapplicableProperty PropspecError]
        consfig.model.property [note-definition preprocess-propapp propapp-hostattrs
                                expanding-afresh]
        consfig.util [keyword-name]
        inspect
        consfig.model.propspec [propspec->data data->propspec]
        consfig.transport.chain [parse-chain]
        os)

;; Every host defined so far, by hostname.
(setv hosts {})


(defn _key [k]
  (or (keyword-name k)
      (raise (ConsfigError f"a hostattr is named by a keyword, not {(hy.repr k)}"))))

(defclass Host []
  "A host: hostname, propspec, hostattrs, and how to deploy it by default.
Call it to deploy it with that default chain."

  (defn __init__ [self hostname propspec * [deploy None] [desc None] [hostattrs None]
                 [groups None] [site-file None]]
    (setv self.hostname hostname
          self.propspec propspec
          self.deploy deploy
          self.desc desc
          self.groups (list (or groups []))
          self.hostattrs (or hostattrs {})
          ;; The consfig file that defines the host: a site's templates and
          ;; files are found relative to its directory (`consfig.site.files`).
          self.site-file site-file
          ;; Prerequisite data: what its :hostattrs provided, (iden1, iden2)
          ;; -> DataItem, every declared item once resolved (consfig.data.items),
          ;; and those of the hosts it deploys, which a :python hop carries.
          self.provided {}
          self.data {}
          self.nested-data {}
          ;; Deployed with a propspec other than its own (`deploy-these`):
          ;; what its own applied under `:reverse` is left alone.
          self.partial False
          ;; The propspec the host is defined with, when a deployment wraps
          ;; it (an image build, in `service.without-starting-services`):
          ;; what its own image holds (`consfig.props.image.own-image`).
          self.own-propspec None))

  (defn __call__ [self #** kwargs]
    "Deploy this host over its default chain: `(athena :check True)`."
    ;; By name, when called: on the controller, where the deployer is (see
    ;; BY_NAME in tests/test_layering.py).  A target never calls a host.
    (setv deploy* hy.I.consfig/deployer/deployment.deploy*)
    (setv known (lfor [name p] (.items (. (inspect.signature deploy*) parameters))
                      :if (= p.kind p.KEYWORD-ONLY)
                      name)
          unknown (lfor k kwargs :if (not-in k known) k))
    (when unknown
      (raise (ConsfigError (+ f"{self.hostname}: unknown option"
                              (if (> (len unknown) 1) "s" "") " "
                              (.join ", " (gfor k unknown f":{(hy.unmangle k)}"))
                              "; a host takes "
                              (.join " " (gfor k known f":{(hy.unmangle k)}"))))))
    (deploy* self.deploy self #** kwargs))

  (defn __repr__ [self] f"<host {self.hostname}>")

  (defn ->data [self]
    "The host as JSON-compatible data."
    {"hostname" self.hostname
     "hostattrs" (propspec->data self.hostattrs)
     "propspec" (propspec->data self.propspec)
     #** (if self.partial {"partial" True} {})})

  (defn [staticmethod] <-data [data]
    (setv host (Host (get data "hostname") (data->propspec (get data "propspec"))
                     :hostattrs (data->propspec (get data "hostattrs"))))
    (setv host.partial (bool (.get data "partial" False)))
    host))

(defn make-host [hostname options desc propspec [where None] [site-file None]]
  "Make and register a host.  OPTIONS is the defhost options dict; WHERE
(file:line of the defhost) places a mistake in it; SITE-FILE is the consfig
file that defines it."
  (setv opts (dfor [k v] (.items (or options {})) (_key k) v)
        unknown (- (set opts) #{"deploy" "groups"}))
  (when unknown
    (raise (ConsfigError f"defhost {hostname}: unknown option(s) {(.join " " (gfor u (sorted unknown) f":{u}"))}; it takes :deploy and :groups")))
  (note-definition f"host {hostname}" where)
  (when (is-not (.get opts "deploy") None)
    (parse-chain (get opts "deploy") (+ (if where f"{where}: " "") f"defhost {hostname}: :deploy")))
  (setv host (Host hostname propspec :deploy (.get opts "deploy") :desc desc
                   :groups (_groups-option (.get opts "groups") hostname where)
                   :site-file site-file)
        (get hosts hostname) host)
  host)

(defn _groups-option [groups hostname where]
  ;; Group names are matched on the command line (`@web`): plain strings.
  (when (is groups None) (return []))
  (when (or (not (isinstance groups #(list tuple)))
            (not (all (gfor g groups (and (isinstance g str) g (not (.startswith g "@")))))))
    (raise (ConsfigError (+ (if where f"{where}: " "")
                            f"defhost {hostname}: :groups is a list of group names, "
                            f"e.g. [\"web\" \"eu\"], not {(hy.repr groups)}"))))
  (lfor g groups (str g)))

(defn find-host [designator]
  "The host DESIGNATOR names: a Host, a registered hostname, or the first
label of exactly one registered hostname."
  (when (isinstance designator Host)
    (return designator))
  (setv name (str designator))
  (when (in name hosts)
    (return (get hosts name)))
  (setv matches (lfor h hosts :if (= (get (.split h ".") 0) name) h))
  (when (= (len matches) 1)
    (return (get hosts (get matches 0))))
  (raise (ConsfigError
           (+ f"unknown host {name}"
              (if hosts (+ "; known hosts: " (.join ", " (sorted hosts))) "; no host is defined")))))

(defn binding-name [hostname]
  "The variable defhost binds a host to: the hostname's first label."
  (setv label (get (.split hostname ".") 0))
  (if (re.fullmatch r"[A-Za-z_][A-Za-z0-9_-]*" label)
      label
      (+ "host-" (re.sub r"[^A-Za-z0-9_-]" "-" hostname))))

(defmacro defhost [_hy_compiler name #* body]
  "Define and register a host, and bind it to the hostname's first label.

  (defhost athena.example.com {:deploy [[:ssh :user \"root\"] :python]}
    \"Web and file server.\"
    (os.debian-stable \"bookworm\" :amd64)
    (file.has-content \"/etc/motd\" \"Welcome to athena\\n\"))

binds `athena` to the host, whose propspec is a `seqprops` of the body: each
property is tried even when an earlier one failed."
  (setv hostname (or (hy.I.consfig/model/propspec.dotted->name name)
                     (if (isinstance name String) (str name) None))
        body (list body)
        options None
        desc None)
  (when (not hostname)
    (raise (PropspecError f"defhost: a host is named by a hostname symbol or string, not {(hy.repr name)}")))
  (when (and body (isinstance (get body 0) Dict))
    (setv options (.pop body 0)))
  (when (and body (isinstance (get body 0) String))
    (setv desc (str (.pop body 0))))
  (setv walked (hy.I.consfig/model/propspec.walk-body body _hy_compiler))
  `(setv ~(Symbol (binding-name hostname))
         (hy.I.consfig/model/host.make-host
           ~hostname ~options ~desc
           (hy.I.consfig/model/propspec.seqprops-of [~@walked])
           ~(hy.I.consfig/model/property.definition-where _hy_compiler name)
           ~(_site-file _hy_compiler))))

(defn _site-file [compiler]
  ;; The file a defhost is read from; None at the REPL.
  (setv f compiler.filename)
  (when (and f (os.path.isfile f)) (os.path.abspath f)))

;; The hostattrs API

(defn _host []
  (try (.get current-host)
       (except [LookupError]
         (raise (ConsfigError "no current host: hostattrs are only available while a host is preprocessed or applied")))))

(defn push-hostattr [k #* values]
  "Push VALUES onto hostattr K of the current host; later pushes come first."
  (setv attrs (. (_host) hostattrs)
        key (_key k))
  (setv (get attrs key) [#* values #* (.get attrs key [])]))

(defn get-hostattrs [a [b None]]
  "All values of a hostattr, newest first:

  (get-hostattrs K)                  hostattr K of the current host
  (get-hostattrs HOST K)             hostattr K of HOST, a host the site defines
                                     (its hostname, first label, or Host object),
                                     its hostattrs computed first when needed
  (get-hostattrs K PREPARED)         hostattr K of PREPARED, a preprocessed Host

A preprocessed Host passed first is read as it is too."
  (cond (is b None) (list (.get (. (_host) hostattrs) (_key a) []))
        (isinstance b Host) (list (.get b.hostattrs (_key a) []))
        (and (isinstance a Host) a.hostattrs) (list (.get a.hostattrs (_key b) []))
        True (_read-site-host a b)))

(defn get-hostattr [a [b None]]
  "The newest value of a hostattr, or None; takes the arguments of
`get-hostattrs`: `(get-hostattr K)`, `(get-hostattr HOST K)`."
  (setv vs (get-hostattrs a b))
  (if vs (get vs 0) None))

(defn get-hostname []
  "The hostname of the current host (None outside a deployment)."
  (setv h (.get current-host None))
  (when h h.hostname))

(defn get-parent-hostattrs [k]
  "Hostattr K of the host deploying this one (for chroots, containers and
hosts deployed from other hosts); an empty list at the top."
  (setv p (.get parent-host))
  (if p (get-hostattrs k p) []))

(defn preserving-hostattrs [thunk]
  "Call THUNK and throw away whatever hostattrs it pushed."
  (setv h (_host)
        saved (copy.deepcopy h.hostattrs))
  (try (thunk)
       (finally (setv h.hostattrs saved))))

(defn inapplicable [message]
  "Veto the current host from a `:hostattrs` subroutine."
  (raise (InapplicableProperty f"{(get-hostname)}: {message}")))

(defn preprocess-host [host [propspec None]]
  "A copy of HOST with its propspec (or PROPSPEC instead) preprocessed and
its hostattrs computed, on the controller, before any connection.  With
PROPSPEC, the hostattrs of HOST's own propspec are computed first.  The host
being preprocessed or applied when this is called (one deploying HOST, or
building it as a chroot) is HOST's parent meanwhile.  Inside a
`site-facts-scope`, a host the site defines is computed once."
  (setv parent (.get current-host None))
  (with [facts (site-facts-scope)]
    (if (and (is parent None) (is (.get hosts host.hostname) host)
             (or (is propspec None) (is propspec host.propspec)))
        (_full-facts facts host)
        (_preprocess facts host propspec parent))))

(defn _preprocess [facts host propspec parent]
  (setv new (Host host.hostname None :deploy host.deploy :desc host.desc
                  :groups host.groups :hostattrs {"hostname" [host.hostname]}
                  :site-file host.site-file)
        new.own-propspec (or host.own-propspec host.propspec))
  (.append facts.computing host.hostname)
  (try
    (with [_ (applying new :parent parent)
           ;; A site host's own propspec, whatever host is being expanded now.
           _ (if (is parent None) (expanding-afresh) (contextlib.nullcontext))]
      (try
        (when (and propspec host.propspec (is-not propspec host.propspec))
          ;; deploy-these: the host keeps the hostattrs its own propspec declares.
          (propapp-hostattrs (preprocess-propapp host.propspec)))
        (setv new.propspec (preprocess-propapp (or propspec host.propspec))
              new.partial (and (is-not propspec None) (is-not propspec host.propspec)))
        (propapp-hostattrs new.propspec)
        (except [e PropspecError]
          (raise (PropspecError f"{host.hostname}: {e}")))))
    (finally (.pop facts.computing)))
  new)

;; Facts from other hosts

;; Reads of hosts nested deeper than this are answered like those of a host
;; still being computed (and checked at the end): it bounds the recursion
;; when every host reads every other.  Each level of reading costs 10 to 30
;; Python frames, so past a few levels the recursion limit is raised to
;; leave room for this many.
(setv MAX-READ-DEPTH 32
      _FRAMES-PER-READ 60)

(setv _site-facts (contextvars.ContextVar "consfig-site-facts" :default None))

(defclass _SiteFacts []
  ;; The hostattrs of the site's hosts, computed during one preparation.
  (defn __init__ [self]
    (setv self.full {}
          ;; Hostname → its hostattrs without the properties that read other hosts.
          self.partial {}
          ;; Hostnames being preprocessed, outermost first.
          self.computing []
          ;; True while a partial computation runs: reads are left out.
          self.deferring False
          ;; #(reader path hostname key values) read from partial hostattrs.
          self.reads [])))

(defn [contextlib.contextmanager] site-facts-scope []
  "A context in which every host the site defines has its hostattrs
computed at most once, however many hosts read them; what was read of a
host still being computed is checked when the outermost scope ends.
`preprocess-host` opens one when none is open; open one around the
preparation of several hosts (`consfig.deployer.fleet` does) to share it."
  (setv facts (.get _site-facts))
  (if facts
      (yield facts)
      (do (setv facts (_SiteFacts)
                token (.set _site-facts facts))
          (try
            (yield facts)
            (_check-reads facts)
            (finally (.reset _site-facts token))))))

(defn _full-facts [facts host]
  (when (not-in host.hostname facts.full)
    (setv (get facts.full host.hostname) (_preprocess facts host None None)))
  (get facts.full host.hostname))

(defn _partial-facts [facts host]
  (when (not-in host.hostname facts.partial)
    (setv deferring facts.deferring
          facts.deferring True)
    (try
      (setv (get facts.partial host.hostname)
            (try (. (_preprocess facts host None None) hostattrs)
                 (except [DeferredRead]
                   ;; A read outside any property's :hostattrs (in a :preprocess).
                   {"hostname" [host.hostname]})))
      (finally (setv facts.deferring deferring))))
  (get facts.partial host.hostname))

(defn _read-site-host [designator k]
  (setv host (find-host designator)
        name host.hostname
        key (_key k))
  (with [facts (site-facts-scope)]
    (cond
      (in name facts.full)
      (list (.get (. (get facts.full name) hostattrs) key []))
      facts.deferring
      (raise (DeferredRead))
      (or (in name facts.computing) (>= (len facts.computing) MAX-READ-DEPTH))
      (do (setv values (list (.get (_partial-facts facts host) key []))
                path (if (in name facts.computing)
                         (cut facts.computing (.index facts.computing name) None)
                         (list facts.computing)))
          (.append facts.reads #((or (get-hostname) "the REPL") [#* path name] name key values
                                 (in name facts.computing)))
          values)
      True
      (do (when (> (len facts.computing) 4)
            (sys.setrecursionlimit (max (sys.getrecursionlimit)
                                        (+ 1000 (* _FRAMES-PER-READ MAX-READ-DEPTH)))))
          (list (.get (. (_full-facts facts host) hostattrs) key []))))))

(defn _check-reads [facts]
  ;; A host read while it was being computed was read without the properties
  ;; that read other hosts: right only if those did not change what was read.
  (while facts.reads
    (setv #(reader path name key values cycle) (.pop facts.reads 0)
          final (list (.get (. (_full-facts facts (get hosts name)) hostattrs) key [])))
    (when (!= final values)
      (raise (ConsfigError
               (if cycle
                   (+ f"the hostattrs of {(.join " -> " path)} depend on each other: "
                      f"{reader} reads {name}'s \"{key}\", which {name} computes from what it "
                      "reads of other hosts; break the cycle by making one of them stop reading the other")
                   (+ f"{reader} reads {name}'s \"{key}\" through more than {MAX-READ-DEPTH} "
                      f"hosts, each reading the next ({(.join " -> " (cut path 0 3))} -> … -> {name}), "
                      f"and {name} computes it from what it reads of other hosts: read it from fewer hosts")))))))

(defn hosts-with-hostattr [k]
  "The hosts the site defines that have hostattr K (the current host too):
a dict of hostname → values (newest first), in the order the hosts were
defined.  Their hostattrs are computed first when needed."
  (with [_ (site-facts-scope)]
    (dfor [name host] (list (.items hosts))
          :setv values (_read-site-host host k)
          :if values
          name values)))

(defn host-groups-of [host pushed]
  "The groups HOST belongs to: those its defhost declares, then those in
PUSHED, the values of its hostattr `groups` (newest first; each a group name
or a list of them)."
  (setv found (list host.groups))
  (for [value (reversed pushed)]
    (for [g (if (isinstance value #(list tuple)) value [value])]
      (when (not-in (str g) found)
        (.append found (str g)))))
  found)

(defn hosts-in-group [group]
  "The hostnames of the hosts the site defines that are in GROUP (declared
in their defhost options, or pushed as hostattr `groups`), in the order they
were defined.  Their hostattrs are computed first when needed."
  (with [_ (site-facts-scope)]
    (lfor [name host] (list (.items hosts))
          :if (in group (host-groups-of host (_read-site-host host "groups")))
          name)))

(export :objects [Host hosts make-host find-host binding-name push-hostattr
                  get-hostattrs get-hostattr get-hostname get-parent-hostattrs
                  preserving-hostattrs inapplicable preprocess-host site-facts-scope
                  hosts-with-hostattr hosts-in-group host-groups-of]
        :macros [defhost])
