"A site module written as a consfig is: `(require consfig *)` and `(import
consfig *)` first, so that, shipped to the target of a :python hop, it
imports there every module whose names consfig offers."

(require consfig *)
(import consfig *
        sys)

(defprop modules-recorded-by-a-site :python [path]
  "PATH lists the modules the Python applying this host has imported so
far, one a line."
  (:desc f"modules recorded in {path}")
  (:apply (with [f (open path "w")] (.write f (.join "\n" (sorted sys.modules))))
          NO-CHANGE))
