"Locales: generating them, and choosing them for the system (Debian's
`locales` package: /etc/locale.gen, locale-gen, update-locale)."

(eval-when-compile
  (require consfig.model.property [defprop]
           consfig.model.propspec [defproplist]))
(import consfig.model.watchspec [watch-path])
(import re
        shlex
        consfig.apply.combinators [with-unapply unapplied]
        consfig.apply.actions [run output read-remote-file change-if-changes-file]
        consfig.errors [FailedChange]
        consfig.props [package]
        consfig.props.file [map-file-lines]
        consfig.types *)

(setv locale-name (matching "locale-name" "a locale name such as \"en_GB.UTF-8\" (no spaces)"
                            r"[A-Za-z][A-Za-z0-9_.@-]*")
      locale-variable (matching "locale-variable" "a locale variable: LANG, LANGUAGE or LC_…"
                                r"LANG|LANGUAGE|LC_[A-Z]+"))

(setv LOCALE-GEN "/etc/locale.gen")
(setv DEFAULT-LOCALE "/etc/default/locale")

(defn normalise [locale]
  "LOCALE as `locale -a` lists it: the codeset lowercased and without
punctuation (\"en_GB.UTF-8\" is \"en_GB.utf8\")."
  (setv m (re.fullmatch r"([^.@]*)(?:\.([^@]*))?(@.*)?" locale))
  (if (and m (get m 2))
      (+ (get m 1) "." (re.sub r"[^a-z0-9]" "" (.lower (get m 2))) (or (get m 3) ""))
      locale))

(defn generated-locales []
  "The locales the target has generated, as `locale -a` lists them."
  (set (.split (output "locale" "-a" :check True))))

(defn _line-re [locale]
  ;; \"en_GB\" must not match the line of \"en_GB.UTF-8\".
  (re.compile (+ r"^\s*(#\s*)?(" (re.escape locale) r"(\s.*)?)$")))

(defn _enabled? [locale]
  (setv rx (_line-re locale))
  (any (gfor l (.splitlines (or (read-remote-file LOCALE-GEN) ""))
             :if (setx m (re.match rx l))
             (not (get m 1)))))

(defn _set-line [locale enabled]
  ;; Uncomment (or comment out) LOCALE's line of /etc/locale.gen.
  (setv rx (_line-re locale)
        found False)
  (defn edit [l]
    (nonlocal found)
    (setv m (re.match rx l))
    (when (not m) (return l))
    (setv found True)
    (if enabled (get m 2) (+ "# " (get m 2))))
  (setv result (map-file-lines LOCALE-GEN (fn [lines] (lfor l lines (edit l)))))
  (when (and enabled (not found))
    (raise (FailedChange f"{locale} is not in {LOCALE-GEN}, so it cannot be generated; is it a locale glibc supports?")))
  result)

(defprop generated :posix [#^ locale-name locale]
  "LOCALE (such as \"en_GB.UTF-8\") is enabled in /etc/locale.gen and
generated.  Does not install `locales`: see `available`.  Unapplying disables
it there and regenerates the locales."
  (:desc f"{locale} locale generated")
  (:watch [(watch-path LOCALE-GEN) (watch-path "/usr/lib/locale")])
  (:check (and (_enabled? locale) (in (normalise locale) (generated-locales))))
  (:apply
    (_set-line locale True)
    (run "locale-gen" :timeout 900))
  (:unapply
    (_set-line locale False)
    (run "locale-gen" :timeout 900)))

(defproplist available :posix [#^ locale-name locale]
  "The `locales` package is installed and LOCALE (such as \"en_GB.UTF-8\") is
generated.  LOCALE must have a line, commented out or not, in
/etc/locale.gen.  Unapplying ungenerates it (and leaves `locales` installed)."
  (:desc f"{locale} locale available")
  (with-unapply (package.installed "locales")
                (generated locale)
                :unapply (unapplied (generated locale))))

(defn _default-locale []
  ;; /etc/default/locale as a dict; values may be quoted for the shell.
  (setv out {})
  (for [l (.splitlines (or (read-remote-file DEFAULT-LOCALE) ""))]
    (setv m (re.match r"^\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)$" l))
    (when m
      (setv (get out (get m 1))
            (try (.join " " (shlex.split (get m 2) :comments True))
                 (except [ValueError] (get m 2))))))
  out)

(defprop variables-set :posix [#^ locale-name locale #^ locale-variable #* variables]
  "The system's locale VARIABLES (LANG, LANGUAGE, LC_*) are each LOCALE, in
/etc/default/locale.  Does not generate LOCALE: see `selected-for`.
Unapplying unsets them."
  (:desc f"{locale} locale selected for {(.join " " variables)}")
  (:watch [(watch-path DEFAULT-LOCALE)])
  (:check (setv current (_default-locale))
          (all (gfor v variables (= (.get current v) locale))))
  (:apply
    (change-if-changes-file DEFAULT-LOCALE
      (fn [] (run "update-locale" #* (gfor v variables f"{v}={locale}") :timeout 120))))
  (:unapply
    (change-if-changes-file DEFAULT-LOCALE
      (fn [] (run "update-locale" #* variables :timeout 120)))))

(defproplist selected-for :posix [#^ locale-name locale #^ locale-variable #* variables]
  "LOCALE is available and is the system's choice for each of VARIABLES:

  (locale.selected-for \"en_GB.UTF-8\" \"LC_PAPER\" \"LC_MONETARY\")

Unapplying unsets VARIABLES but leaves LOCALE available, as other settings
may still need it.  Debian and derivatives."
  (:desc f"{locale} locale selected for {(.join " " variables)}")
  (with-unapply (available locale)
                (variables-set locale #* variables)
                :unapply (unapplied (variables-set locale #* variables))))

(export :objects [LOCALE-GEN DEFAULT-LOCALE normalise generated-locales generated
                  available variables-set selected-for])
