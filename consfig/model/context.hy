"The deployment context: which host is being applied, through which
connection, deployed by which parent, and what lives as long as a deployment
(`deployment-cache`) or a connection (connattrs).

`applying` is the one place that sets the current host, connection and
parent host; preprocessing, establishing a chain and applying a propspec all
go through it.

Connattrs are state properties keep on the connection they act through, for
as long as it lives — a cache of what dpkg says is installed, a flag saying
no service may start here:

  (get-connattr \"apt-installed\")           ; None when unset
  (get-connattr \"no-services\" False)       ; with a default
  (set-connattr \"apt-installed\" packages)
  (forget-connattr \"apt-installed\")        ; unset it

Keys are strings (a quoted keyword, `':no-services`, names the same key)."

(import contextlib
        contextvars
        consfig.errors [ConsfigError]
        consfig.util [keyword-name])

(setv current-host (contextvars.ContextVar "consfig-host")
      current-connection (contextvars.ContextVar "consfig-connection")
      parent-host (contextvars.ContextVar "consfig-parent-host" :default None))

(setv _KEEP (object))

(defn [contextlib.contextmanager] applying [host [connection _KEEP] * [parent _KEEP]]
  "The context in which properties of HOST act (through CONNECTION, the
host deploying it being PARENT): what `get-hostattr`, `run` and
`get-parent-hostattrs` refer to.  CONNECTION or PARENT left out stay as they
are."
  (setv tokens [(.set current-host host)
                (when (is-not connection _KEEP) (.set current-connection connection))
                (when (is-not parent _KEEP) (.set parent-host parent))])
  (try
    (yield)
    (finally
      (when (get tokens 2) (.reset parent-host (get tokens 2)))
      (when (get tokens 1) (.reset current-connection (get tokens 1)))
      (.reset current-host (get tokens 0)))))

(defn connection []
  "The connection the property being applied acts through."
  (try (.get current-connection)
       (except [LookupError]
         (raise (ConsfigError "no connection: properties act only while a deployment applies them")))))

(defn _connattr-key [key]
  (or (keyword-name key)
      (raise (ConsfigError f"a connattr is named by a keyword or a string, not {(hy.repr key)}"))))

(defn get-connattr [key [default None]]
  "The connattr KEY of the current connection, or DEFAULT when unset."
  (.get (. (connection) connattrs) (_connattr-key key) default))

(defn set-connattr [key value]
  "Set the connattr KEY of the current connection to VALUE; return VALUE."
  (setv (get (. (connection) connattrs) (_connattr-key key)) value)
  value)

(defn forget-connattr [key]
  "Unset the connattr KEY of the current connection (if it was set)."
  (.pop (. (connection) connattrs) (_connattr-key key) None)
  None)

(setv _command-timeout (contextvars.ContextVar "consfig-command-timeout" :default None))

(defn [contextlib.contextmanager] commands-bounded-by [seconds]
  "The context in which a command run with no timeout of its own is stopped
after SECONDS (what `with-command-timeout` sets around its properties)."
  (setv token (.set _command-timeout seconds))
  (try
    (yield)
    (finally (.reset _command-timeout token))))

(defn command-timeout []
  "The timeout of a command run with none of its own here: that of the
innermost `commands-bounded-by`, or None."
  (.get _command-timeout))

(setv _deployment-cache (contextvars.ContextVar "consfig-deployment-cache"))

(defn [contextlib.contextmanager] establishing-for [host * [seed None]]
  "The context of one deployment of HOST, around establishing its chain and
applying through it: hops take their defaults from the host (`:ssh` connects
to its hostname) and a secret a hop asks the user for (a sudo password) is
asked for once, here and in the deployments nested in this one.  SEED, a
dict, starts the cache of an outermost deployment: what was asked for
before several hosts started."
  (setv cache-token (when (is (.get _deployment-cache None) None)
                      (.set _deployment-cache (dict (or seed {})))))
  (try
    (with [(applying host)]
      (yield))
    (finally
      (when cache-token (.reset _deployment-cache cache-token)))))

(defn deployment-cache []
  "A dict that lives as long as the outermost deployment being made (a
fresh one each call outside any)."
  (setv cache (.get _deployment-cache None))
  (if (is cache None) {} cache))

(export :objects [current-host current-connection parent-host applying connection
                  get-connattr set-connattr forget-connattr establishing-for
                  deployment-cache commands-bounded-by command-timeout])
