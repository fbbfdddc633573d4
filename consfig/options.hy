"A run's options, as one typed record.

What a run does, said once where it starts (the CLI, `deploy*`,
`deploy-hosts*`, `consfig converge`, an image) and read where it matters
(the engine, the reporter, a `:python` hop's target), rather than passed
by hand from function to function:

  (RunOptions :check True :verbosity 2)
  (RunOptions :converge (ConvergeSettings :noop True :interval 60))

Both records are frozen: a nested deployment that unapplies makes its own
with `dataclasses.replace`.  Over a `:python` hop they travel as plain
data, `options->data` one way and `data->options` the other, which checks
what it reads as the constructors do.

What a chain says (its hops' `:timeout` and `:command-timeout`) stays with
the chain: a nested deployment's chain has its own."

(import dataclasses [dataclass fields]
        numbers [Real]
        consfig.errors [ConsfigError])

(defclass RunOptionError [ConsfigError]
  "A run option that is unknown or has a value of the wrong type.")

(defn _flag? [v] (isinstance v bool))
(defn _count? [v] (and (isinstance v int) (not (isinstance v bool)) (>= v 0)))
(defn _seconds? [v] (or (is v None) (and (isinstance v Real) (not (isinstance v bool)) (> v 0))))
(defn _text? [v] (or (is v None) (and (isinstance v str) (not (in "\x00" v)))))
(defn _count-or-none? [v] (or (is v None) (and (_count? v) (> v 0))))

(defn _checked [record kinds]
  ;; Each field of RECORD against its (test phrase) in KINDS.
  (for [f (fields record)]
    (setv v (getattr record f.name)
          #(ok? phrase) (get kinds f.name))
    (when (not (ok? v))
      (raise (RunOptionError
               f"run option :{(hy.unmangle f.name)} wants {phrase}, not {(hy.repr v)}")))))

(defclass [(dataclass :frozen True)] ConvergeSettings []
  "How the converging agent (`consfig.converge.agent.converge-after`) keeps a
host: NOOP reports drift and repairs nothing; INTERVAL, the seconds between
checks of a property that watches nothing; UNIT-POLL, between polls of a
unit's state where D-Bus is not there; LOG, the directory of its event log
(None: consfig's state directory); LIMIT and BURST, how many repairs of one
property a second and in a row (`consfig.converge.agent.RepairLimit`);
ALONGSIDE, run even while another agent keeps the host; IMAGE, the image
file whose replacement stops it.  None: the agent's default."
  (setv #^ bool noop False
        #^ "Real | None" interval None
        #^ "Real | None" unit-poll None
        #^ "str | None" log None
        #^ "Real | None" limit None
        #^ "int | None" burst None
        #^ bool alongside False
        #^ "str | None" image None)

  (defn __post_init__ [self]
    (_checked self {"noop" #(_flag? "True or False")
                    "interval" #(_seconds? "a number of seconds above 0, or None")
                    "unit_poll" #(_seconds? "a number of seconds above 0, or None")
                    "log" #(_text? "a directory's path, or None")
                    "limit" #(_seconds? "a number of repairs a second above 0, or None")
                    "burst" #(_count-or-none? "a number of repairs above 0, or None")
                    "alongside" #(_flag? "True or False")
                    "image" #(_text? "an image file's path, or None")})))

(defclass [(dataclass :frozen True)] RunOptions []
  "What a run does.  UNAPPLY: undo the propspec rather than apply it.  CHECK:
change nothing, report what would change (DIFF: with the diffs of files).
VERBOSITY: 0 the properties' lines, 1 their output, 2 the commands, 3 the
frames of a `:python` hop.  CONVERGE: None, or the `ConvergeSettings` with
which the chain's last Python stays and keeps the host converged."
  (setv #^ bool unapply False
        #^ bool check False
        #^ bool diff False
        #^ int verbosity 0
        #^ "ConvergeSettings | None" converge None)

  (defn __post_init__ [self]
    (_checked self {"unapply" #(_flag? "True or False")
                    "check" #(_flag? "True or False")
                    "diff" #(_flag? "True or False")
                    "verbosity" #(_count? "a whole number from 0")
                    "converge" #((fn [v] (or (is v None) (isinstance v ConvergeSettings)))
                                 "a ConvergeSettings, or None")})))

(defn _record->data [record]
  (dfor f (fields record)
        (hy.unmangle f.name) (getattr record f.name)))

(defn _data->record [cls data what]
  (when (not (isinstance data dict))
    (raise (RunOptionError f"{what} must be a mapping, not {(hy.repr data)}")))
  (setv known (dfor f (fields cls) (hy.unmangle f.name) f.name)
        unknown (sorted (gfor k data :if (not-in k known) (str k))))
  (when unknown
    (raise (RunOptionError (+ f"{what}: unknown option {(.join ", " unknown)} "
                              f"(known: {(.join ", " known)})"))))
  (cls #** (dfor [k v] (.items data) (get known k) v)))

(defn options->data [options]
  "RunOptions OPTIONS as JSON-compatible data, for the wire: a dict keyed by
the options' Hy names (`\"unit-poll\"`), the converge settings a dict too."
  (setv data (_record->data options))
  (when options.converge
    (setv (get data "converge") (_record->data options.converge)))
  data)

(defn data->options [data]
  "The `RunOptions` DATA (from `options->data`) stands for, checked: an
unknown option or a value of the wrong type raises `RunOptionError`."
  (when (not (isinstance data dict))
    (raise (RunOptionError f"run options must be a mapping, not {(hy.repr data)}")))
  (setv data (dict data))
  (when (is-not (.get data "converge") None)
    (setv (get data "converge") (_data->record ConvergeSettings (get data "converge")
                                               "converge settings")))
  (_data->record RunOptions data "run options"))

(defn run-options [options #** given]
  "OPTIONS, a `RunOptions`, when given; else one made of the keywords GIVEN
(`deploy*`'s `:check`, `:verbosity`, …).  Both: a `RunOptionError`, unless
the keywords are the defaults, as a function that takes both passes them."
  (when (is options None)
    (return (RunOptions #** given)))
  (when (not (isinstance options RunOptions))
    (raise (RunOptionError f"options must be a RunOptions, not {(hy.repr options)}")))
  (setv defaults (RunOptions)
        both (lfor [k v] (.items given) :if (!= v (getattr defaults k)) (hy.unmangle k)))
  (when both
    (raise (RunOptionError (+ f"give the run's options as OPTIONS or as keywords, not both "
                              f"(:{(.join " :" both)} given with OPTIONS)"))))
  options)

(export :objects [RunOptions ConvergeSettings RunOptionError options->data data->options
                  run-options])
