;; A run's options: one typed record, and its wire format.

(import dataclasses [FrozenInstanceError replace]
        json
        pytest
        consfig.options [RunOptions ConvergeSettings RunOptionError options->data data->options
                         run-options])

(defn _over-the-wire [options]
  ;; As a :python hop carries it: JSON text between the two sides.
  (data->options (json.loads (json.dumps (options->data options)))))

(defn test-run-options-default-to-applying-quietly []
  (setv o (RunOptions))
  (assert (= #(o.unapply o.check o.diff o.verbosity o.converge) #(False False False 0 None))
          (repr o)))

(defn test-converge-settings-default-to-the-agents-own []
  (setv s (ConvergeSettings))
  (assert (= #(s.noop s.interval s.unit-poll s.log s.limit s.burst s.alongside s.image)
             #(False None None None None None False None))
          (repr s)))

(defn test-run-options-cannot-be-changed-once-made []
  (setv o (RunOptions :check True))
  (with [(pytest.raises FrozenInstanceError)]
    (setv o.check False))
  (assert o.check "still a check"))

(defn test-a-changed-copy-leaves-the-original-as-it-was []
  (setv o (RunOptions :verbosity 2)
        u (replace o :unapply True))
  (assert (and u.unapply (= u.verbosity 2) (not o.unapply)) #(o u)))

(defn test-run-options-come-back-equal-over-the-wire []
  (setv o (RunOptions :unapply True :check True :diff True :verbosity 3))
  (assert (= (_over-the-wire o) o) (options->data o)))

(defn test-converge-settings-come-back-equal-over-the-wire []
  (setv o (RunOptions :check True
                      :converge (ConvergeSettings :noop True :interval 2.5 :unit-poll 1
                                                  :log "/var/log/a b" :limit 0.5 :burst 3
                                                  :alongside True :image "/srv/h.pyz")))
  (assert (= (_over-the-wire o) o) (options->data o)))

(defn test-the-wire-format-names-options-as-hy-does []
  (setv data (options->data (RunOptions :converge (ConvergeSettings :unit-poll 5))))
  (assert (= (sorted data) ["check" "converge" "diff" "unapply" "verbosity"]) data)
  (assert (= (get data "converge" "unit-poll") 5) data))

(defn test-reading-refuses-an-unknown-option-and-names-it []
  (with [e (pytest.raises RunOptionError)]
    (data->options {"check" True "dry-run" True}))
  (assert (in "unknown option dry-run" (str e.value)) (str e.value)))

(defn test-reading-refuses-an-unknown-converge-setting-and-names-it []
  (with [e (pytest.raises RunOptionError)]
    (data->options {"converge" {"noop" True "every" 5}}))
  (assert (in "converge settings: unknown option every" (str e.value)) (str e.value)))

(defn test-reading-refuses-a-value-of-the-wrong-type []
  (with [e (pytest.raises RunOptionError)]
    (data->options {"check" "yes"}))
  (assert (= (str e.value) "run option :check wants True or False, not \"yes\"") (str e.value)))

(defn test-reading-refuses-what-is-not-a-mapping []
  (with [e (pytest.raises RunOptionError)]
    (data->options ["check"]))
  (assert (in "must be a mapping" (str e.value)) (str e.value)))

(defn test-verbosity-is-a-whole-number-from-zero []
  (for [bad [-1 1.5 True "2" None]]
    (with [e (pytest.raises RunOptionError)]
      (RunOptions :verbosity bad))
    (assert (in ":verbosity wants a whole number from 0" (str e.value)) (str e.value))))

(defn test-converge-settings-refuse-a-zero-interval []
  (with [e (pytest.raises RunOptionError)]
    (ConvergeSettings :interval 0))
  (assert (in ":interval wants a number of seconds above 0" (str e.value)) (str e.value)))

(defn test-converge-is-settings-not-a-mapping []
  (with [e (pytest.raises RunOptionError)]
    (RunOptions :converge {"noop" True}))
  (assert (in ":converge wants a ConvergeSettings" (str e.value)) (str e.value)))

(defn test-run-options-are-made-of-the-keywords-when-none-are-given []
  (assert (= (run-options None :check True :verbosity 1) (RunOptions :check True :verbosity 1))
          "made of the keywords"))

(defn test-run-options-given-are-used-as-they-are []
  (setv o (RunOptions :unapply True))
  (assert (is (run-options o :check False :verbosity 0) o) "the defaults say nothing"))

(defn test-run-options-refuse-options-and-keywords-both []
  (with [e (pytest.raises RunOptionError)]
    (run-options (RunOptions) :check True))
  (assert (in ":check given with OPTIONS" (str e.value)) (str e.value)))
