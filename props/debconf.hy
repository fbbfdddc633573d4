"debconf's database: answers to packages' questions, given before the
packages ask them."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.apply.engine [Drift]
        consfig.props.apt [run-waiting-for-locks]
        consfig.props.os [required]
        consfig.types *)

(setv question (matching "debconf-question" "a debconf question name such as tzdata/Areas"
                         r"[A-Za-z0-9][A-Za-z0-9_.+/:-]*")
      question-type (matching "debconf-type"
                              "a debconf type: string, boolean, select, multiselect, note, text or password"
                              r"string|boolean|select|multiselect|note|text|password"))

(defn answer [package question]
  "The value debconf holds for QUESTION (as PACKAGE's), or None when it has
none."
  (setv r (run-waiting-for-locks "debconf-communicate" package :input f"GET {question}\n"
                                 :check False :timeout 60)
        #(code _ value) (.partition (.rstrip r.stdout "\n") " "))
  (when (= code "0") value))

(defprop preseeded :posix [#^ package-name package #^ question question
                           #^ question-type type #^ line value]
  "debconf holds VALUE as the answer to PACKAGE's QUESTION, of TYPE, and
marks it seen (`debconf-set-selections`): when PACKAGE is installed or
reconfigured later it takes VALUE and does not ask.  To change what an
installed package has already configured, use `apt.reconfigured`.

  (debconf.preseeded \"tzdata\" \"tzdata/Areas\" \"select\" \"Europe\")"
  (:watch [(watch-path "/var/cache/debconf/config.dat")])
  (:desc f"debconf: {package} {question} = {value}")
  (:hostattrs (required "debian"))
  (:check (setv have (answer package question))
          (or (= have value) (Drift f"{question}: {have} → {value}")))
  (:apply (run-waiting-for-locks "debconf-set-selections"
                                 :input f"{package} {question} {type} {value}\n"
                                 :timeout 60)))

(export :objects [answer preseeded])
