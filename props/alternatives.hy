"The Debian alternatives system: which of several programs providing the
same command (editor, x-www-browser, java, …) a generic name leads to."

(eval-when-compile (require consfig.model.property [defprop]))
(import posixpath
        consfig.model.watchspec [watch-path])
(import consfig.apply.actions [NO-CHANGE run]
        consfig.apply.engine [Drift]
        consfig.errors [FailedChange]
        consfig.types *)

(setv alternative-name (matching "alternative-name"
                                 "an alternative's name (letters, digits, _ . + and -, not starting with -)"
                                 r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"))

(defn query [name]
  "What `update-alternatives --query NAME` says of NAME, as a dict
(\"Status\", \"Value\", and \"Alternatives\", the list of the choices), or None
when there is no such alternative."
  (setv r (run "update-alternatives" "--query" name :check False :timeout 60))
  (when r.ok?
    (setv fields {"Alternatives" []})
    (for [l (.splitlines r.stdout)]
      (setv #(k _ v) (.partition l ": "))
      (if (= k "Alternative")
          (.append (get fields "Alternatives") v)
          (when (not-in k fields) (setv (get fields k) v))))
    fields))

(defn _known [name]
  (or (query name)
      (raise (FailedChange f"there is no alternative {name} (is the package that provides it installed?)"))))

(defprop selected :posix [#^ alternative-name name #^ abs-path path]
  "The alternative NAME is set, by hand, to PATH, one of its choices
(`update-alternatives --set`): package upgrades leave it there.  A PATH that
is not one of NAME's choices is a failure that lists them.  Unapplying
returns NAME to automatic mode.

  (alternatives.selected \"editor\" \"/usr/bin/vim.basic\")"
  (:watch [(watch-path (posixpath.join "/etc/alternatives" name))])
  (:desc f"alternative {name} is {path}")
  (:check (setv q (query name))
          (or (and q (= (get q "Status") "manual") (= (.get q "Value") path))
              (Drift f"alternative {name}: {(if q (.get q "Value") "none")} → {path}")))
  (:apply
    (setv q (_known name))
    (when (not-in path (get q "Alternatives"))
      (raise (FailedChange (+ f"{path} is not a choice for the alternative {name}; its choices: "
                              (.join ", " (get q "Alternatives"))))))
    (run "update-alternatives" "--set" name path :timeout 60))
  (:unapply (if (= (.get (or (query name) {}) "Status") "manual")
                (run "update-alternatives" "--auto" name :timeout 60)
                NO-CHANGE)))

(defprop automatic :posix [#^ alternative-name name]
  "The alternative NAME is in automatic mode: it leads to its choice of
highest priority, and follows packages as they come and go."
  (:watch [(watch-path (posixpath.join "/etc/alternatives" name)) (watch-path (posixpath.join "/var/lib/dpkg/alternatives" name))])
  (:desc f"alternative {name} is automatic")
  (:check (setv q (query name))
          (or (and q (= (get q "Status") "auto"))
              (Drift f"alternative {name} would return to automatic mode")))
  (:apply (_known name)
          (run "update-alternatives" "--auto" name :timeout 60)))

(export :objects [query selected automatic])
