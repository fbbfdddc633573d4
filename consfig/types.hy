"Parameter types: what a property's parameter accepts.

A type is a value, a `Type`: a name, a phrase that says what it accepts
(for messages: `:mode must be a file mode (an integer such as 0o640), not
\"0640\"`), a check, and how to print an accepted value (modes in octal).
Types are written in a property's lambda list with Hy's annotation syntax,

  (defprop has-content :posix [#^ abs-path path #^ string content
                               * #^ file-mode [mode None] #^ boolean [secret False]]
    …)

and checked on the controller when the propapp is built, and again when a
propspec is read back from data.  Types compose (`(list-of package-name)`,
`(one-of user-name id-number)`), and a site defines its own with `defparamtype`:

  (defparamtype port (int-range 1 65535) \"a TCP port\")

Calling a type on a value returns the value or raises `ParameterTypeError`."

(import re
        ipaddress
        urllib.parse
        hy.models [Keyword]
        consfig.errors [PropspecError])

(defclass ParameterTypeError [PropspecError]
  "A value is not of the type a parameter wants.")

(defclass Type []
  "A parameter type.  CHECK takes a value and returns true when it is
accepted; or, for a type made of others, `explain` is overridden to say
which part is wrong.  NORMALISE, if given, takes an accepted value and
returns it in the one spelling kept (see `normalise`)."
  (defn __init__ [self name phrase check [render None] * [normalise None]]
    (setv self.name name
          self.phrase phrase
          self._check check
          self._render render
          self.normaliser normalise))

  (defn normalise [self value]
    "VALUE, checked, in the spelling this type keeps: an absolute path with
no trailing `/`, a port given as text as an integer (the types of a hop's
arguments, `consfig.transport.hop`).  Raise `ParameterTypeError` when it is refused."
    (self value)
    (if self.normaliser (self.normaliser value) value))

  (defn explain [self value]
    "None when VALUE is accepted, otherwise what is wrong with it."
    (if (self._check value) None f"must be {self.phrase}, not {(self.render value)}"))

  (defn accepts [self value]
    "Whether VALUE is of this type."
    (is (self.explain value) None))

  (defn render [self value]
    "VALUE as Hy source, in the spelling that suits this type."
    (if self._render (self._render value) (show value)))

  (defn __call__ [self value]
    (setv problem (self.explain value))
    (when problem (raise (ParameterTypeError f"value {problem}")))
    value)

  (defn __repr__ [self] self.name))

(defn show [value]
  "VALUE as Hy source, for messages: strings quoted, keywords with their colon."
  (hy.repr value))

(defn named [name t [phrase None]]
  "Type T under another NAME (and PHRASE): what `defparamtype` builds."
  (Type name (or phrase t.phrase) t.accepts t.render :normalise t.normaliser))

(defmacro defparamtype [name t [phrase None]]
  "Define NAME as the type T, optionally with a PHRASE for messages:

  (defparamtype port (int-range 1 65535) \"a TCP port (1 to 65535)\")

is equivalent to `(setv port (named \"port\" (int-range 1 65535) \"a TCP port…\"))`."
  `(setv ~name (hy.I.consfig/types.named ~(str name) ~t ~phrase)))

(defn predicate [name phrase f]
  "A type accepting the values F returns true for."
  (Type name phrase (fn [v] (try (bool (f v)) (except [Exception] False)))))

(defn matching [name phrase regex]
  "A type accepting the strings REGEX matches entirely."
  (setv r (re.compile regex))
  (Type name phrase (fn [v] (and (isinstance v str) (bool (.fullmatch r v))))))

(defn _int? [v] (and (isinstance v int) (not (isinstance v bool))))

(defclass DecimalSpelt [int]
  "An integer a consfig wrote in decimal with the three or four digits of
an octal mode (`644`, `0755`): Python reads 644 as mode 0o1204, the classic
slip for 0o644.  Refused where a `file-mode` is taken; anywhere else the
walker of propspecs passes it on as a plain int."
  (setv __slots__ #()))

(defclass _FileMode [Type]
  (defn explain [self value]
    (if (isinstance value DecimalSpelt)
        (+ f"must be {self.phrase}, not the decimal number {(int value)} (mode "
           f"{(oct value)}), seldom what is meant: write the octal mode with 0o (0o{(int value)})")
        (.explain (super) value))))

(setv anything (Type "anything" "anything" (fn [v] True))
      string (Type "string" "a string" (fn [v] (isinstance v str)))
      non-empty-string (Type "non-empty-string" "a non-empty string"
                             (fn [v] (and (isinstance v str) (bool v))))
      line (Type "line" "one line of text (a string with no newline, carriage return or NUL)"
                 (fn [v] (and (isinstance v str) (not (re.search "[\n\r\x00]" v)))))
      non-empty-line (Type "non-empty-line" "a non-empty line of text (no newline, carriage return or NUL)"
                           (fn [v] (and (isinstance v str) v (not (re.search "[\n\r\x00]" v)))))
      byte-string (Type "byte-string" "a byte string" (fn [v] (isinstance v bytes)))
      text (Type "text" "text (a string with no NUL)"
                 (fn [v] (and (isinstance v str) (not-in "\x00" v))))
      integer (Type "integer" "an integer" _int?)
      seconds (Type "seconds" "a positive number of seconds"
                    (fn [v] (and (or (_int? v) (isinstance v float)) (> v 0))))
      boolean (Type "boolean" "True or False" (fn [v] (isinstance v bool)))
      keyword (Type "keyword" "a keyword" (fn [v] (isinstance v Keyword)))
      ;; No `..`: a path that climbs back out of a directory is never what a
      ;; site means, and makes it say one place while naming another.  No
      ;; newline: a path lands in line-oriented files (fstab, units, sources).
      abs-path (Type "abs-path" "an absolute path (a string starting with /, with no .. segment, newline, carriage return or NUL)"
                     (fn [v] (and (isinstance v str) (.startswith v "/")
                                  (not (re.search "[\n\r\x00]" v))
                                  (not-in ".." (.split v "/")))))
      path (Type "path" "a path (a non-empty string with no NUL)"
                 (fn [v] (and (isinstance v str) v (not-in "\x00" v))))
      file-mode (_FileMode "file-mode" "a file mode (an integer such as 0o640)"
                           (fn [v] (and (_int? v) (<= 0 v 0o7777)))
                           (fn [v] (if (_int? v) (oct v) (show v))))
      name (matching "name" "a name (no whitespace, not starting with -)"
                     r"[^\s\x00-][^\s\x00]*")
      user-name (matching "user-name"
                          "a user name (lower-case letters, digits, _ and -, not starting with a digit or -)"
                          r"[a-z_][a-z0-9_-]{0,31}\$?")
      group-name (named "group-name" user-name
                        "a group name (lower-case letters, digits, _ and -, not starting with a digit or -)")
      id-number (Type "id-number" "a numeric user or group id (0 to 4294967294)"
                      (fn [v] (and (_int? v) (<= 0 v 4294967294))))
      package-name (matching "package-name"
                             "a package name (Debian policy: lower-case letters, digits, + - and ., starting with a letter or digit; :ARCH allowed)"
                             r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?")
      hostname (matching "hostname"
                         "a hostname (labels of letters, digits and -, separated by dots)"
                         r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
      url (predicate "url" "a URL (scheme://HOST/…, or file:///PATH, with no whitespace)"
                     (fn [v]
                       (setv parts (urllib.parse.urlsplit v))
                       (and (isinstance v str)
                            (not (re.search r"[\s\x00-\x1f\x7f]" v))
                            (re.match r"[A-Za-z][A-Za-z0-9+.-]*://" v)
                            (or parts.netloc
                                (and (= parts.scheme "file") (.startswith parts.path "/"))))))
      shell-identifier (matching "shell-identifier"
                                 "a shell variable name (letters, digits and _, not starting with a digit)"
                                 r"[A-Za-z_][A-Za-z0-9_]*")
      regex (predicate "regex" "a regular expression (Python syntax)"
                       (fn [v] (and (isinstance v str) (re.compile v)))))

(defclass Applicable []
  "What a `propspec` parameter accepts: `consfig.model.property.Propapp`,
a propapp, is its one kind.  (Declared here, below the model, so that the
types need not import it.)"
  (setv __slots__ #()))

(setv propspec (Type "propspec" "a propspec (a propapp)" (fn [v] (isinstance v Applicable))))

(defclass Binder []
  "`?addr` in a pattern of the dataspace: it matches any value of its
field, and stands for that value in the properties a match holds (see
consfig.model.dataspace).  Any parameter accepts a binder; the value bound
to it is checked when the match substitutes it."
  (setv __slots__ #("name")
        __hash__ None)
  (defn __init__ [self name]
    (setv self.name name))
  (defn __eq__ [self other]
    (and (isinstance other Binder) (= self.name other.name)))
  (defn __repr__ [self] f"?{self.name}"))

(defclass Wildcard []
  "`_` in a pattern of the dataspace: it matches any value, and binds none."
  (setv __slots__ #())
  (defn __eq__ [self other] (isinstance other Wildcard))
  (defn __hash__ [self] 0)
  (defn __repr__ [self] "_"))

(setv wildcard (Wildcard))

(defn _ip-address? [v]
  (and (isinstance v str)
       (try (do (ipaddress.ip-address v) True)
            (except [ValueError] False))))

(setv ip-address (Type "ip-address" "an IPv4 or IPv6 address, as text (\"10.0.0.5\")" _ip-address?)
      port (Type "port" "a TCP or UDP port (an integer from 1 to 65535)"
                 (fn [v] (and (_int? v) (<= 1 v 65535)))))

(defn int-range [lo hi]
  "Integers from LO to HI inclusive."
  (Type f"(int-range {lo} {hi})" f"an integer from {lo} to {hi}"
        (fn [v] (and (_int? v) (<= lo v hi)))))

(defn enum [#* choices]
  "One of the keywords named by CHOICES.

`(enum \"daily\" \"weekly\")` accepts `:daily` and `:weekly`.  (Names, because a keyword in a call is an argument
name in Hy.)"
  (setv choices (tuple (gfor c choices (if (isinstance c Keyword) c (Keyword (str c)))))
        ;; Spelt without `show`: Hy's printer (and what it imports) is not
        ;; for a target that only loads a property module.
        spelt (lfor c choices (+ ":" c.name)))
  (Type (+ "(enum " (.join " " spelt) ")")
        (+ "one of " (.join ", " spelt))
        (fn [v] (in v choices))))

(defclass _Union [Type]
  (defn __init__ [self types]
    (setv self.types types)
    (.__init__ (super) (+ "(one-of " (.join " " (map repr types)) ")")
               (.join " or " (gfor t types t.phrase))
               (fn [v] (any (gfor t types (.accepts t v))))))
  (defn render [self value]
    (for [t self.types]
      (when (.accepts t value) (return (.render t value))))
    (show value)))

(defn one-of [#* types]
  "A value of any of TYPES."
  (_Union types))

(setv _none (Type "None" "None" (fn [v] (is v None))))

(defn optional [t]
  "A value of type T, or None."
  (setv u (_Union #(t _none)))
  (setv u.name f"(optional {(repr t)})")
  u)

(defclass _ListOf [Type]
  (defn __init__ [self t non-empty]
    (setv self.element t
          self.non-empty non-empty)
    (.__init__ (super) (+ (if non-empty "(non-empty-list-of " "(list-of ") (repr t) ")")
               (+ (if non-empty "a non-empty list" "a list") f", each element {t.phrase}")
               None))
  (defn explain [self value]
    (cond (not (isinstance value #(list tuple)))
          f"must be {self.phrase}, not {(show value)}"
          (and self.non-empty (not value))
          f"must be {self.phrase}, not an empty list"
          True
          (do (for [[i v] (enumerate value)]
                (setv problem (.explain self.element v))
                (when problem (return f"(element {i}) {problem}")))
              None)))
  (defn render [self value]
    (if (isinstance value #(list tuple))
        (+ "[" (.join " " (gfor v value (.render self.element v))) "]")
        (show value))))

(defn list-of [t]
  "A list (or tuple) whose elements are all of type T."
  (_ListOf t False))

(defn non-empty-list-of [t]
  "A list of at least one element, all of type T."
  (_ListOf t True))

(defn dict-of [k v]
  "A dict whose keys are of type K and values of type V."
  (defn explain [value]
    (when (not (isinstance value dict))
      (return f"must be a dict, not {(show value)}"))
    (for [[key val] (.items value)]
      (setv problem (or (.explain k key) (.explain v val)))
      (when problem (return f"(entry {(show key)}) {problem}")))
    None)
  (setv t (Type f"(dict-of {(repr k)} {(repr v)})"
                f"a dict of {k.phrase} to {v.phrase}" None))
  (setv t.explain explain)
  t)

(defclass _Secret [Type]
  (defn __init__ [self t]
    (setv self.inner t)
    (.__init__ (super) f"(secret {(repr t)})" t.phrase t.accepts t.render))
  (defn explain [self value]
    (when (not (.accepts self.inner value))
      f"must be {self.phrase} (the value given is secret, so not shown)")))

(defn secret [t]
  "Type T, for a secret value: a refusal does not show the value."
  (_Secret t))

(defn secret-type? [t]
  "Whether T is a `(secret …)` type: a value of it is never shown."
  (isinstance t _Secret))

(defn annotation-type [annotation]
  "The `Type` of a parameter's ANNOTATION, or None when it has none."
  (if (isinstance annotation Type) annotation None))

(export :objects [Type ParameterTypeError DecimalSpelt named predicate matching show
                  anything string non-empty-string line non-empty-line text
                  byte-string integer seconds boolean keyword abs-path path file-mode name user-name
                  group-name id-number package-name hostname url shell-identifier
                  regex propspec Binder Wildcard wildcard ip-address port int-range enum one-of optional list-of
                  non-empty-list-of dict-of secret annotation-type]
        :macros [defparamtype])
