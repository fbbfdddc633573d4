"The keyboard layout of the console and of X, in /etc/default/keyboard
(Debian's keyboard-configuration)."

(eval-when-compile (require consfig.model.propspec [defproplist]))
(import consfig.props [etc-default]
        consfig.types *)

(setv xkb-value (matching "xkb-value"
                          "an XKB name or list, such as us, dvorak or ctrl:nocaps,compose:ralt (letters, digits and _ ( ) , : + -)"
                          r"[A-Za-z0-9_(),:+-]*"))

(defn keyboard-settings [layout variant options model]
  "The settings of /etc/default/keyboard for those of LAYOUT, VARIANT,
OPTIONS and MODEL that are given, as a dict."
  (dfor [k v] [["XKBLAYOUT" layout] ["XKBVARIANT" variant] ["XKBOPTIONS" options]
               ["XKBMODEL" model]]
        :if (is-not v None)
        k v))

(defproplist configured :posix [* #^ (optional xkb-value) [layout None]
                                #^ (optional xkb-value) [variant None]
                                #^ (optional xkb-value) [options None]
                                #^ (optional xkb-value) [model None]]
  "The keyboard has LAYOUT, VARIANT, OPTIONS and MODEL, those that are given
(the others stay as they are), in /etc/default/keyboard: the console reads
it at boot (`setupcon`), and X and Wayland sessions when they start.

  (keyboard.configured :layout \"gb\" :options \"ctrl:nocaps\")"
  (:invariant (keyboard-settings layout variant options model)
              "needs at least one of :layout, :variant, :options and :model")
  (:desc (+ "keyboard " (.join ", " (gfor [k v] (.items (keyboard-settings layout variant options model))
                                          f"{k}={v}"))))
  (etc-default.contains "keyboard" (keyboard-settings layout variant options model)))

(export :objects [keyboard-settings configured])
