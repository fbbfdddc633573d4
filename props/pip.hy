"Python packages from PyPI (or an index of the site's): virtual
environments with pinned packages, and applications installed with pipx.

Packages are compared with what `pip freeze` and `pipx list` say, so a
deployment that changes nothing runs no pip install.  Where packages come
from is pip's own configuration on the target (/etc/pip.conf), or
INDEX-URL, FIND-LINKS (a directory or a URL of wheels) and NO-INDEX, which
are given to every pip these properties run through the environment
(PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX).  With `:user`, everything
runs as that user (through runuser, unless the connection is that user),
whose files the environment then are."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import json
        posixpath
        re
        consfig.apply.actions [NO-CHANGE run run-ok? remove-remote]
        consfig.apply.engine [Drift]
        consfig.errors [FailedChange]
        consfig.props.user [as-user]
        consfig.types *)

(setv pip-pin (matching "pip-pin"
                        (+ "a pinned requirement NAME==VERSION (\"requests==2.31.0\", "
                           "\"uvicorn[standard]==0.30.1\")")
                        (+ r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]+\])?"
                           r"==[A-Za-z0-9][A-Za-z0-9.+!_-]*"))
      pip-requirement (matching "pip-requirement"
                                "a package NAME, or NAME==VERSION"
                                (+ r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"
                                   r"(==[A-Za-z0-9][A-Za-z0-9.+!_-]*)?"))
      links (named "links" (one-of abs-path url) "an absolute path or a URL"))

;; What pip installs into every environment itself, which an exact
;; environment keeps unless it pins them.
(setv _PIP-OWN #("pip" "setuptools" "wheel" "distribute"))

(defn normal-name [name]
  "NAME as PyPI compares names (PEP 503): lower case, runs of - _ . as one -."
  (.lower (re.sub r"[-_.]+" "-" name)))

(defn _normal-version [v]
  ;; "1.17" is "1.17.0" to pip: trailing zeros of the release do not count.
  (setv m (re.match r"([0-9]+(?:\.[0-9]+)*)(.*)" (.lower v)))
  (if m
      (+ (re.sub r"(\.0+)+$" "" (.group m 1)) (.group m 2))
      (.lower v)))

(defn _split-pin [pin]
  (setv #(name _ version) (.partition pin "=="))
  #((normal-name (re.sub r"\[.*\]" "" name)) version))

(defn _pip-env [index-url find-links no-index]
  (dfor [k v] [["PIP_INDEX_URL" index-url] ["PIP_FIND_LINKS" find-links]
               ["PIP_NO_INDEX" (when no-index "1")] ["PIP_DISABLE_PIP_VERSION_CHECK" "1"]
               ["PIP_NO_INPUT" "1"]]
        :if (is-not v None) k v))

(defn _run [user argv env #** kw]
  (run (if user (as-user user argv) argv) :env env :timeout 1800 #** kw))

(defn _failed [what r]
  (FailedChange f"{what} failed (exit {r.exit-code}):\n{(.strip (+ r.stdout r.stderr))}"))

;; Virtual environments

(defn _python [path] (posixpath.join path "bin" "python"))

(defn frozen [path [user None]]
  "What `pip freeze --all` says the environment PATH holds: normal name →
version; None when PATH is no environment."
  (when (not (run-ok? "test" "-x" (_python path) :timeout 60))
    (return None))
  (setv r (_run user [(_python path) "-m" "pip" "freeze" "--all"] (_pip-env None None None)
                :check False))
  (when (not r.ok?)
    (raise (_failed f"pip freeze in {path}" r)))
  (dfor l (.splitlines r.stdout) :if (in "==" l)
        :setv #(n v) (_split-pin (.strip l))
        n v))

(defn venv-plan [have pins exact]
  "What makes an environment that holds HAVE (as `frozen` says) hold PINS:
a dict of \"install\" (pins to install) and \"remove\" (names to uninstall,
only when EXACT)."
  (setv wanted (dfor p pins :setv #(n v) (_split-pin p) n v)
        install (lfor p pins :setv #(n v) (_split-pin p)
                      :if (!= (_normal-version (.get have n "")) (_normal-version v))
                      p)
        remove (if exact
                   (sorted (gfor n have :if (and (not-in n wanted) (not-in n _PIP-OWN)) n))
                   []))
  {"install" install "remove" remove})

(defn _plan-text [path plan fresh]
  (.join "; " (+ (if fresh [f"{path} would be created"] [])
                 (if (get plan "install") [f"would install {(.join " " (get plan "install"))}"] [])
                 (if (get plan "remove") [f"would remove {(.join " " (get plan "remove"))}"] []))))

(defprop venv-installed :posix [#^ abs-path path #^ pip-pin #* pins
                                #^ (optional user-name) [user None]
                                #^ (one-of abs-path name) [python "python3"]
                                #^ (optional url) [index-url None]
                                #^ (optional links) [find-links None]
                                #^ boolean [no-index False]
                                #^ boolean [exact False]]
  "PATH is a Python virtual environment (made with `PYTHON -m venv`, which
on Debian needs python3-venv) in which each of PINS (\"NAME==VERSION\") is
installed at that version, and their dependencies.  Only the pins that
`pip freeze` shows missing or at another version are installed.  With
EXACT, the environment holds the pins and nothing else (pip's own tools
aside): what it has besides is uninstalled, the pins are installed without
their dependencies, and `pip check` must pass — PINS is then a lock of
every package.  With USER, the environment is made and changed as that
user.  Unapplying removes PATH, when it is a virtual environment."
  (:watch [(watch-path path)])
  (:desc f"venv {path} with {(.join " " pins)}")
  (:check
    (setv have (frozen path user)
          plan (venv-plan (or have {}) pins exact))
    (or (and (is-not have None) (not (get plan "install")) (not (get plan "remove")))
        (Drift (_plan-text path plan (is have None)))))
  (:apply
    (setv env (_pip-env index-url find-links no-index))
    (when (is (frozen path user) None)
      (setv r (_run user [python "-m" "venv" "--" path] env :check False))
      (when (not r.ok?)
        (raise (_failed (+ f"{python} -m venv {path}"
                           (if (in "ensurepip" (+ r.stdout r.stderr))
                               " (install python3-venv: apt.installed \"python3-venv\")" ""))
                        r))))
    (setv plan (venv-plan (frozen path user) pins exact)
          pip [(_python path) "-m" "pip"])
    (when (get plan "remove")
      (setv r (_run user [#* pip "uninstall" "-y" "-q" "--" #* (get plan "remove")] env
                    :check False))
      (when (not r.ok?) (raise (_failed f"pip uninstall in {path}" r))))
    (when (get plan "install")
      (setv r (_run user [#* pip "install" "-q" #* (if exact ["--no-deps"] []) "--"
                          #* (get plan "install")]
                    env :check False))
      (when (not r.ok?) (raise (_failed f"pip install in {path}" r))))
    (when exact
      (setv r (_run user [#* pip "check"] env :check False))
      (when (not r.ok?)
        (raise (_failed (+ f"pip check in {path} (an exact environment's pins must "
                           "include every dependency)")
                        r))))
    None)
  (:unapply
    (cond (not (run-ok? "test" "-f" (posixpath.join path "pyvenv.cfg") :timeout 60))
          (if (run-ok? "test" "-e" path :timeout 60)
              (raise (FailedChange f"{path} is not a virtual environment (no pyvenv.cfg); not removing it"))
              NO-CHANGE)
          True (remove-remote [path] :recursive True :timeout 600))))

;; pipx

(defn _pipx-env [pipx-home bin-dir index-url find-links no-index]
  {#** (_pip-env index-url find-links no-index)
   #** (dfor [k v] [["PIPX_HOME" pipx-home] ["PIPX_BIN_DIR" bin-dir]] :if v k v)})

(defn pipx-installed-packages [user env]
  "What `pipx list` says is installed: normal name → version."
  (setv r (_run user ["pipx" "list" "--json"] env :check False))
  (when (= r.exit-code 127)
    (raise (FailedChange "pipx is not installed here (apt.installed \"pipx\")")))
  (when (not r.ok?) (raise (_failed "pipx list" r)))
  (dfor [_ v] (.items (.get (json.loads r.stdout) "venvs" {}))
        :setv p (get v "metadata" "main_package")
        (normal-name (get p "package")) (get p "package_version")))

(defprop pipx-installed :posix [#^ pip-requirement package
                                #^ (optional user-name) [user None]
                                #^ (optional abs-path) [pipx-home None]
                                #^ (optional abs-path) [bin-dir None]
                                #^ (optional url) [index-url None]
                                #^ (optional links) [find-links None]
                                #^ boolean [no-index False]]
  "The application PACKAGE (\"NAME\" or \"NAME==VERSION\") is installed
with pipx, in an environment of its own, its commands in pipx's bin
directory: USER's (~/.local/bin, the connection's user by default), or
BIN-DIR with PIPX-HOME (\"/opt/pipx\" and \"/usr/local/bin\" for all
users).  At another version than VERSION, it is installed again.  pipx must
be installed (Debian's pipx).  Unapplying uninstalls it."
  (:unwatched "pipx keeps its virtualenvs where its user's environment says: re-checked at the host's interval")
  (:desc f"pipx installed {package}")
  (:check
    (setv #(name version) (_split-pin package)
          have (.get (pipx-installed-packages user (_pipx-env pipx-home bin-dir None None None))
                     name))
    (cond (is have None) (Drift f"{name} would be installed")
          (and version (!= (_normal-version have) (_normal-version version)))
          (Drift f"{name}: {have} → {version}")
          True True))
  (:apply
    (setv env (_pipx-env pipx-home bin-dir index-url find-links no-index)
          #(name _) (_split-pin package)
          there (in name (pipx-installed-packages user env))
          r (_run user ["pipx" "install" #* (if there ["--force"] []) "--" package] env
                  :check False))
    (when (not r.ok?) (raise (_failed f"pipx install {package}" r)))
    None)
  (:unapply
    (setv env (_pipx-env pipx-home bin-dir None None None)
          #(name _) (_split-pin package))
    (when (in name (pipx-installed-packages user env))
      (setv r (_run user ["pipx" "uninstall" "--" name] env :check False))
      (when (not r.ok?) (raise (_failed f"pipx uninstall {name}" r))))
    None))

(export :objects [venv-installed pipx-installed frozen venv-plan normal-name
                  pipx-installed-packages pip-pin pip-requirement])
