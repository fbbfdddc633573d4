"The site's own files, read on the controller: templates and trees.

A site keeps templates and files beside its consfig.  A relative path names
a file relative to the *site directory*: the directory of the consfig file
that defines the host being prepared (for a host built inside another, such
as a chroot's, that of the host deploying it).  An absolute path is used as
it is.

Templates are Jinja2, rendered with undefined variables as errors
(`StrictUndefined`): a variable a template uses and nobody defined is one
`TemplateProblem` naming the template file, its line and the variable, raised
while the host is prepared, before anything connects.

Everything here runs on the controller, in `:hostattrs`; what it computes
travels to the target as prerequisite data.  jinja2 is imported only when a
template is rendered, so that a target never needs it."

(import os
        hashlib
        stat
        traceback
        consfig.model.context [current-host parent-host]
        consfig.errors [ConsfigError PropspecError]
        consfig.util [keyword-name])

(defclass TemplateProblem [PropspecError]
  "A template could not be rendered: missing, unreadable, a syntax error or
an undefined variable.  WHERE is the template's file and line.")

(defclass SiteFileProblem [PropspecError]
  "A file or tree of the site could not be read.")

(defn site-directory []
  "The site directory of the host being prepared (see the module's
documentation), or None when neither it nor a host deploying it was defined
in a consfig file."
  (for [host [(.get current-host None) (.get parent-host)]]
    (when (getattr host "site_file" None)
      (return (os.path.dirname host.site-file))))
  None)

(defn site-path [path what]
  "PATH, a file of the site, as an absolute path: relative to the site
directory unless absolute.  WHAT says what it is, for the message when there
is no site directory to go by."
  (cond (os.path.isabs path) (os.path.normpath path)
        (site-directory) (os.path.normpath (os.path.join (site-directory) path))
        True (raise (SiteFileProblem
                      (+ f"{what} {path} is a relative path, but this host was not defined "
                         "in a consfig file, whose directory it would be relative to; "
                         "give an absolute path")))))

(defn _display [path]
  (setv rel (os.path.relpath path))
  (if (.startswith rel "..") path rel))

(defn _template-where [e]
  ;; Jinja2 rewrites tracebacks so that a frame of a template's code carries
  ;; the template's file and line: the innermost such frame is where the
  ;; problem is (in an included template, that one).
  (setv where None)
  (for [frame (traceback.extract-tb e.__traceback__)]
    (when (and (os.path.isfile frame.filename)
               (not (.endswith frame.filename #(".py" ".hy" ".pyc"))))
      (setv where f"{(_display frame.filename)}:{frame.lineno}")))
  where)

(defn _variables [variables]
  ;; Variables given in a propspec as `{:port 80}` or `{"port" 80}`.
  (dfor [k v] (.items (or variables {})) (or (keyword-name k) (str k)) v))

(defn render-template [path variables * [data None]]
  "Render the Jinja2 template at PATH (relative to the site directory,
see `site-path`) with VARIABLES (a dict), and return the text.  DATA, when
given, is the function a template calls as `data(iden1, iden2)`.  Every
problem is a `TemplateProblem` naming the template and, where there is one,
its line."
  (import jinja2)  ; lazy: the controller's
  (setv full (site-path path "template")
        directory (os.path.dirname full)
        env (jinja2.Environment
              :loader (jinja2.FileSystemLoader [directory])
              :undefined jinja2.StrictUndefined
              :keep-trailing-newline True
              :autoescape False))
  (when data
    (setv (get env.globals "data") data))
  (try
    (.render (.get-template env (os.path.basename full)) #** (_variables variables))
    (except [e jinja2.TemplateNotFound]
      (raise (TemplateProblem (if (= e.name (os.path.basename full))
                                  "no such template"
                                  f"the template it includes, {e.name}, does not exist")
                              (or (_template-where e) (_display full)))))
    (except [e jinja2.TemplateSyntaxError]
      (raise (TemplateProblem f"template syntax error: {e.message}"
                              f"{(_display (or e.filename full))}:{e.lineno}")))
    (except [e jinja2.UndefinedError]
      (raise (TemplateProblem (+ (_undefined-message e.message)
                                 "; give it in :vars, or check its spelling")
                              (or (_template-where e) (_display full)))))
    (except [e OSError]
      (raise (TemplateProblem f"cannot read the template: {e.strerror}" (_display full))))
    (except [e ConsfigError]
      (when (is e.where None) (setv e.where (_template-where e)))
      (raise))
    (except [e Exception]
      (raise (TemplateProblem f"{(. (type e) __name__)}: {e}"
                              (or (_template-where e) (_display full)))))))

(defn _undefined-message [text]
  ;; "'port' is undefined" → "undefined variable 'port'".
  (if (.endswith text " is undefined")
      f"undefined variable {(cut text 0 (- (len " is undefined")))}"
      text))

(defn file-sha256 [path]
  "The SHA-256 of the file at PATH, in hex."
  (setv h (hashlib.sha256))
  (with [f (open path "rb")]
    (for [chunk (iter (fn [] (.read f 1048576)) b"")]
      (.update h chunk)))
  (.hexdigest h))

(defn tree-manifest [path]
  "What the site file or directory PATH (absolute) holds, as a list of
entries sorted by path: `{\"path\" REL \"type\" \"file\"|\"dir\"|\"link\"
\"mode\" BITS …}`, a file with its `\"sha256\"`, a symlink with its
`\"target\"`.  PATH itself is the entry whose path is \"\".  Anything else
(a socket, a device) is a `SiteFileProblem`."
  (when (not (os.path.lexists path))
    (raise (SiteFileProblem f"{(_display path)} does not exist")))
  (setv out [])
  (defn entry [full rel]
    ;; Names travel as text: one that is not UTF-8 would come back from the
    ;; target as another name.
    (try (.encode rel "utf-8")
         (except [UnicodeEncodeError]
           (raise (SiteFileProblem (+ (.decode (os.fsencode (_display full)) "utf-8" "backslashreplace")
                                     ": the names of a site's files must be UTF-8")))))
    (setv st (os.lstat full)
          mode (stat.S-IMODE st.st-mode))
    (cond (stat.S-ISLNK st.st-mode) {"path" rel "type" "link" "mode" 0o777
                                     "target" (os.readlink full)}
          (stat.S-ISDIR st.st-mode) {"path" rel "type" "dir" "mode" mode}
          (stat.S-ISREG st.st-mode) {"path" rel "type" "file" "mode" mode
                                     "sha256" (file-sha256 full)}
          True (raise (SiteFileProblem f"{(_display full)} is neither a file, a directory nor a symlink"))))
  (.append out (entry path ""))
  (when (= (get out 0 "type") "dir")
    (for [[root dirs files] (os.walk path :onerror (fn [e] (raise e)))]
        (.sort dirs)
        (for [name (+ (sorted dirs) (sorted files))]
          (setv full (os.path.join root name))
          (.append out (entry full (os.path.relpath full path))))))
  (sorted out :key (fn [e] (get e "path"))))

(export :objects [TemplateProblem SiteFileProblem site-directory site-path render-template
                  file-sha256 tree-manifest])
