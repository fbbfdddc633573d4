"Hosts and hostattrs.

A host is a hostname, a propspec and, once preprocessed, its hostattrs: a
mapping of attribute name → list of values, newest first.  `defhost` defines a
host; the hostattrs API (`push-hostattr`, `get-hostattr`, …) is what
`:hostattrs` subroutines use on the controller, and what `:check`/`:apply`
subroutines read on the target."

(import copy
        re
        hy.models [Dict String Symbol]
        consfig.context [applying current-host parent-host]
        consfig.errors [ConsfigError InapplicableProperty PropspecError]
        consfig.property [note-definition]
        consfig.util [keyword-name])

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
          ;; files are found relative to its directory (`consfig.sitefiles`).
          self.site-file site-file
          ;; Prerequisite data: what its :hostattrs provided, (iden1, iden2)
          ;; -> DataItem, every declared item once resolved (consfig.data),
          ;; and those of the hosts it deploys, which a :python hop carries.
          self.provided {}
          self.data {}
          self.nested-data {}))

  (defn __call__ [self #** kwargs]
    (import consfig.deployment [deploy*])
    (deploy* self.deploy self #** kwargs))

  (defn __repr__ [self] f"<host {self.hostname}>")

  (defn ->data [self]
    "The host as JSON-compatible data."
    (import consfig.propspec [propspec->data])
    {"hostname" self.hostname
     "hostattrs" (propspec->data self.hostattrs)
     "propspec" (propspec->data self.propspec)})

  (defn [staticmethod] <-data [data]
    (import consfig.propspec [data->propspec])
    (Host (get data "hostname") (data->propspec (get data "propspec"))
          :hostattrs (data->propspec (get data "hostattrs")))))

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
    (import consfig.chain [parse-chain])
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
  (setv hostname (or (hy.I.consfig/propspec.dotted->name name)
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
  (setv walked (hy.I.consfig/propspec.walk-body body _hy_compiler))
  `(setv ~(Symbol (binding-name hostname))
         (hy.I.consfig/host.make-host
           ~hostname ~options ~desc
           ((hy.I.consfig/property.find-property "consfig.combinators.seqprops")
             #* (gfor p [~@walked] :if (is-not p None) p))
           ~(hy.I.consfig/property.definition-where _hy_compiler name)
           ~(_site-file _hy_compiler))))

(defn _site-file [compiler]
  ;; The file a defhost is read from; None at the REPL.
  (import os)
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

(defn get-hostattrs [k [host None]]
  "All values of hostattr K, newest first."
  (list (.get (. (or host (_host)) hostattrs) (_key k) [])))

(defn get-hostattr [k [host None]]
  "The newest value of hostattr K, or None."
  (setv vs (get-hostattrs k host))
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
building it as a chroot) is HOST's parent meanwhile."
  (import consfig.property [preprocess-propapp propapp-hostattrs])
  (setv new (Host host.hostname None :deploy host.deploy :desc host.desc
                  :groups host.groups :hostattrs {"hostname" [host.hostname]}
                  :site-file host.site-file))
  (with [(applying new :parent (.get current-host None))]
    (try
      (when (and propspec host.propspec)
        ;; deploy-these: the host keeps the hostattrs its own propspec declares.
        (propapp-hostattrs (preprocess-propapp host.propspec)))
      (setv new.propspec (preprocess-propapp (or propspec host.propspec)))
      (propapp-hostattrs new.propspec)
      (except [e PropspecError]
        (raise (PropspecError f"{host.hostname}: {e}")))))
  new)

(export :objects [Host hosts make-host find-host binding-name push-hostattr
                  get-hostattrs get-hostattr get-hostname get-parent-hostattrs
                  preserving-hostattrs inapplicable preprocess-host]
        :macros [defhost])
