"Connection chains: reading and checking them, establishing and closing them.

A chain is Hy data, a list of hops applied left to right:
`[[:ssh :user \"deploy\"] [:sudo :user \"root\"] :python]`.  `parse-chain`
turns it into a list of `#(name kwargs)` after checking every hop type,
argument name and argument type against the hop's `Hop` description, so
that a mistake in a chain is reported before anything connects, in one
line.  `establish-chain` then makes the hops one inside the other."

(import contextlib
        importlib
        difflib
        keyword
        pkgutil
        hy.models [Keyword]
        consfig.errors [ChainError]
        consfig.types [ParameterTypeError]
        consfig.util [keyword-name]
        consfig.transport.local [LocalConnection]
        consfig.connections)

(defn _hop-module [name]
  (try
    (importlib.import-module (+ "consfig.connections." (hy.mangle name)))
    (except [e ModuleNotFoundError]
      (when (not (.startswith (or e.name "") "consfig.connections"))
        (raise))
      None)))

(defn known-hops []
  "The names of the hop types consfig has (one module each in
`consfig.connections`)."
  (sorted (gfor m (pkgutil.iter-modules consfig.connections.__path__)
                (hy.unmangle m.name))))

(defn hop-spec [name]
  "The `Hop` description of the hop type NAME, or a `ChainError` that
suggests the nearest known name."
  (setv mod (_hop-module name))
  (when (or (is mod None) (not (hasattr mod "HOP")))
    (setv known (known-hops)
          near (difflib.get-close-matches name known 1))
    (raise (ChainError (+ f"unknown hop type :{name}"
                          (if near
                              f"; did you mean :{(get near 0)}?"
                              (+ " (consfig knows " (.join " " (gfor k known f":{k}")) ")"))))))
  mod.HOP)

(defn parse-chain [chain [where None]]
  "Normalise CHAIN to a list of `#(name kwargs)` hops, checking every hop
type, argument and argument type before anything connects.  A mistake is a
`ChainError` of one line, prefixed with WHERE (a file:line, a host) if given."
  (try
    (_parse-chain chain)
    (except [e ChainError]
      (if where
          (raise (ChainError e.message (if e.where f"{where}: {e.where}" where)) :from None)
          (raise)))))

(defn _parse-chain [chain]
  (when (or (isinstance chain Keyword) (isinstance chain str))
    (setv chain [chain]))
  (when (_one-hop? chain)
    (setv chain [chain]))
  (when (not (isinstance chain #(list tuple)))
    (raise (ChainError f"a connection chain is a list of hops, not {(hy.repr chain)}")))
  (when (not chain)
    (raise (ChainError "a connection chain needs at least one hop, e.g. :local or [:ssh :python]")))
  (lfor hop chain (_parse-hop hop)))

(defn _one-hop? [chain]
  ;; `[:ssh :user \"x\"]` given alone is one hop with arguments, where
  ;; `[:ssh :python]` is two hops: the second item is a value, or a keyword
  ;; naming an argument of the first hop.
  (when (and (isinstance chain #(list tuple))
             (> (len chain) 1)
             (isinstance (get chain 0) Keyword))
    (setv second (get chain 1))
    (cond (isinstance second #(list tuple)) False
          (not (isinstance second Keyword)) True
          True (try (in second.name (. (hop-spec (. (get chain 0) name)) arguments))
                    (except [ChainError] False)))))

(defn _parse-hop [hop]
  (setv items (if (isinstance hop #(list tuple)) (list hop) [hop])
        head (and items (get items 0))
        name (when (isinstance head #(Keyword str)) (keyword-name head)))
  (when (not name)
    (raise (ChainError f"a hop is a keyword or a keyword-headed list, not {(hy.repr hop)}")))
  (setv spec (hop-spec name)
        rest (cut items 1 None)
        kwargs {})
  (when (% (len rest) 2)
    (raise (ChainError f"hop :{name}: arguments come in :keyword value pairs, got {(hy.repr rest)}")))
  (for [i (range 0 (len rest) 2)]
    (setv k (get rest i)
          v (get rest (+ i 1)))
    (when (or (not (isinstance k Keyword)) (not-in k.name spec.arguments))
      (raise (ChainError (_unknown-argument name k spec))))
    (setv (get kwargs k.name) (_checked name k.name v (get spec.arguments k.name))))
  (setv missing (- spec.required (set kwargs)))
  (when missing
    (raise (ChainError (+ f"hop :{name} needs "
                          (.join " and " (gfor m (sorted missing) f":{m}"))
                          ", e.g. " (_example name (sorted missing) spec)))))
  #(name kwargs))

(defn _unknown-argument [name k spec]
  (setv near (when (isinstance k Keyword)
               (difflib.get-close-matches k.name (list spec.arguments) 1)))
  (+ f"hop :{name} has no argument {(hy.repr k)}"
     (cond near f"; did you mean :{(get near 0)}?"
           spec.arguments (+ " (it takes " (.join " " (gfor a (sorted spec.arguments) f":{a}")) ")")
           True " (it takes none)")))

(defn _checked [name k v type]
  (try
    (.normalise type v)
    (except [ParameterTypeError]
      (raise (ChainError f"hop :{name}: :{k} wants {type.phrase}, not {(hy.repr v)}")))))

(defn _example [name missing spec]
  (hy.repr [(Keyword name) #* (sum (gfor m missing [(Keyword m) "…"]) [])]))

(defn establish-chain [chain [start None]]
  "Establish the parsed CHAIN hop by hop, starting from the controller (or
from the connection START: a host deploying another one).  Return the list
of connections made, innermost last; close them in reverse.  A hop that
takes the rest of the chain (`:python`) receives it and ends the walk."
  (setv conns [(or start (LocalConnection))])
  (try
    (for [[i [name kwargs]] (enumerate chain)]
      (setv spec (hop-spec name))
      (cond
        (= name "local") (continue)
        spec.takes-rest
        (do (.append conns (spec.establish (get conns -1) (cut chain (+ i 1) None)
                                           #** (python-kwargs kwargs)))
            (break))
        True (.append conns ((if (_python-next? chain i)
                                 spec.establish-before-python
                                 spec.establish)
                             (get conns -1) #** (python-kwargs kwargs)))))
    (except [BaseException]
      (close-chain conns)
      (raise)))
  conns)

(defn _python-next? [chain i]
  (and (< (+ i 1) (len chain))
       (. (hop-spec (get chain (+ i 1) 0)) takes-rest)))

(defn python-kwargs [kwargs]
  "The arguments of a parsed hop as Python keyword arguments."
  ;; `:strict-host-key-checking` names the parameter `strict_host_key_checking`,
  ;; and `:from`, a Python keyword, the parameter `from_`.
  (dfor [k v] (.items kwargs)
        (if (keyword.iskeyword (hy.mangle k)) (+ (hy.mangle k) "_") (hy.mangle k))
        v))

(defn [contextlib.contextmanager] with-chain [chain [start None]]
  "The context in which the parsed CHAIN is established (from the connection
START, as `establish-chain` does), giving its connections, innermost last;
those it made are closed however the context ends (START is not).

  (with [conns (with-chain chain)]
    (.run (get conns -1) (Script \"uname -a\")))"
  (setv conns (establish-chain chain start))
  (try
    (yield conns)
    (finally
      (close-chain (if start (cut conns 1 None) conns)))))

(defn close-chain [conns]
  "Close the connections of an established chain, innermost first."
  (for [c (reversed conns)]
    (try (.close c)
         (except [Exception] None))))

(defn chain->data [chain]
  "A parsed chain as printable Hy data: `[[:ssh :user \"x\"] :sudo]`."
  (lfor [name kwargs] chain
        (if kwargs
            [(Keyword name) #* (sum (gfor [k v] (.items kwargs) [(Keyword k) v]) [])]
            (Keyword name))))

(export :objects [parse-chain hop-spec known-hops chain->data establish-chain close-chain with-chain
                  python-kwargs])
