"Properties of type :python for the meta-parameter tests over the :python
hop.  Imported as the top-level module `meta_testprops`, as a site's consfig
module would be, so the hop ships it to the target by its file."

(require consfig.model.property [defprop])
(import os
        consfig.errors [FailedChange])

(defprop fails-until :python [counter failures]
  "Count each attempt in the file COUNTER, with open() on the target; the
first FAILURES attempts fail, as an apt run meeting a held lock would."
  (:desc f"fails {failures} times")
  (:apply
    (setv n (+ 1 (if (os.path.exists counter)
                     (int (with [f (open counter)] (.read f)))
                     0)))
    (with [f (open counter "w")] (.write f (str n)))
    (when (<= n failures)
      (raise (FailedChange f"attempt {n}: could not get the lock")))
    :changed))
