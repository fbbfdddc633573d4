;; Chains are read and checked before anything connects.

(import consfig.transport.chain [parse-chain chain->data]
        consfig.errors [ChainError])

(defn chain-error [chain [where None]]
  (try (parse-chain chain where)
       (except [e ChainError] (str e))
       (else (assert False f"{(hy.repr chain)} must be refused"))))

(defn test-a-lone-hop-with-arguments-is-one-hop []
  (assert (= (parse-chain [:ssh :user "x"]) [#("ssh" {"user" "x"})]) "a value follows")
  (assert (= (parse-chain [:ssh :timeout 5]) [#("ssh" {"timeout" 5})]) "a keyword naming an argument"))

(defn test-keywords-that-name-hops-are-hops []
  (assert (= (parse-chain [:ssh :sudo :python]) [#("ssh" {}) #("sudo" {}) #("python" {})])
          "three hops"))

(defn test-argument-values-are-checked-and-normalised []
  (assert (= (parse-chain [[:ssh :port "2222"] [:chroot :into "/srv/x/"]])
             [#("ssh" {"port" 2222}) #("chroot" {"into" "/srv/x"})])
          "a port as a number, a directory without its trailing slash"))

(defn test-a-wrong-argument-type-says-what-is-wanted []
  (assert (= (chain-error [[:ssh :port 0]]) "hop :ssh: :port wants a port number (1-65535), not 0")
          "port out of range")
  (assert (in ":into wants an absolute path" (chain-error [[:chroot :into "srv"]])) "relative into")
  (assert (in ":install wants true or false" (chain-error [[:python :install "yes"]])) "install"))

(defn test-an-unknown-hop-suggests-the-nearest []
  (assert (= (chain-error [:shh]) "unknown hop type :shh; did you mean :ssh?") "shh")
  (assert (in "consfig knows :as :chroot" (chain-error [:teleport])) "nothing near: the list"))

(defn test-an-unknown-argument-suggests-the-nearest []
  (assert (= (chain-error [[:sudo :usr "x"]]) "hop :sudo has no argument :usr; did you mean :user?")
          "usr"))

(defn test-a-required-argument-is-required []
  (assert (in "hop :as needs :user" (chain-error [:as])) "as without user"))

(defn test-an-empty-chain-is-refused []
  (assert (in "at least one hop" (chain-error [])) "empty"))

(defn test-where-prefixes-the-message []
  (assert (= (chain-error 5 "site.hy:3: defhost a: :deploy")
             "site.hy:3: defhost a: :deploy: a connection chain is a list of hops, not 5")
          "where"))

(defn test-a-parsed-chain-prints-as-hy-data []
  (assert (= (hy.repr (chain->data (parse-chain [[:ssh :user "x"] :sudo])))
             "[[:ssh :user \"x\"] :sudo]")
          "round trip"))
