;; The parameter type vocabulary: each type accepts what it names and
;; refuses the rest with a phrase a sysadmin can act on.

(require consfig.types [defparamtype])
(import consfig.types *)

(defn accepts [t #* values]
  (for [v values] (assert (.accepts t v) f"{t} should accept {(hy.repr v)}")))

(defn refuses [t #* values]
  (for [v values] (assert (not (.accepts t v)) f"{t} should refuse {(hy.repr v)}")))

(defn test-string [] (accepts string "" "a\nb") (refuses string 1 None b"x"))
(defn test-non-empty-string [] (accepts non-empty-string "x") (refuses non-empty-string "" 1))
(defn test-line [] (accepts line "" "a b") (refuses line "a\nb" "a\rb" "a\x00" 1))
(defn test-non-empty-line [] (accepts non-empty-line "x") (refuses non-empty-line "" "x\n"))
(defn test-text [] (accepts text "a\nb") (refuses text "a\x00" 1))
(defn test-integer [] (accepts integer 0 -3) (refuses integer True "1" 1.0))
(defn test-int-range []
  (accepts (int-range 1 10) 1 10)
  (refuses (int-range 1 10) 0 11 "5"))
(defn test-boolean [] (accepts boolean True False) (refuses boolean 0 "yes" None))
(defn test-keyword [] (accepts keyword ':a) (refuses keyword "a"))
(defn test-abs-path []
  (accepts abs-path "/" "/etc/x y" "/-dash")
  (refuses abs-path "relative/path" "" "/a\x00b" 5))
;; A path a site names goes into fstab, units and sources, one per line:
;; a newline or carriage return in it is refused when the consfig is loaded.
;; Quotes, $(…), spaces and a leading dash are ordinary (docs/security.md).
(defn test-abs-path-refuses-a-line-break-and-takes-other-hostile-names []
  (accepts abs-path "/srv/it's \"q\"" "/srv/$(id -u)" "/srv/-rf" "/srv/a\tb" "/srv/café")
  (refuses abs-path "/srv/a\nb" "/srv/a\rb" "/srv/a\n"))
(defn test-path [] (accepts path "a/b" "/c") (refuses path "" "a\x00" None))
(defn test-file-mode []
  (accepts file-mode 0o640 0 0o7777)
  (refuses file-mode "0640" -1 0o10000 True))
(defn test-file-mode-renders-in-octal []
  (assert (= (.render file-mode 0o640) "0o640") (.render file-mode 0o640)))
(defn test-name [] (accepts name "foo" "a.b") (refuses name "-x" "--version" "a b" "a\n" ""))
(defn test-user-name []
  (accepts user-name "root" "_apt" "www-data" "user$")
  (refuses user-name "bad user" "-x" "1abc" "Root" "" "a\nb"))
(defn test-group-name [] (accepts group-name "adm") (refuses group-name "no good"))
(defn test-id-number [] (accepts id-number 0 1000) (refuses id-number -1 "1000" True))
(defn test-package-name []
  (accepts package-name "nginx" "g++" "libc6:amd64" "python3.11")
  (refuses package-name "--version" "Nginx" "a" "-x" "a b" 42))
(defn test-hostname []
  (accepts hostname "localhost" "web.example.com" "a-b.c")
  (refuses hostname "-x" "a_b" "a..b" "" "a b"))
(defn test-url []
  (accepts url "https://example.com/x.git" "file:///srv/repo")
  (refuses url "example.com" "--upload-pack=x" "http://a b" 5))
(defn test-shell-identifier []
  (accepts shell-identifier "FOO" "_x1")
  (refuses shell-identifier "X=1;touch /tmp/p;Y" "1X" "A-B" ""))
(defn test-regex [] (accepts regex "^a.*$") (refuses regex "(" 5))
(defn test-propspec-type []
  (import consfig.props [cmd])
  (accepts propspec (cmd.single "true"))
  (refuses propspec "true" ["cmd.single"]))
(defn test-enum []
  (accepts (enum "daily" "weekly") ':daily)
  (refuses (enum "daily" "weekly") ':hourly "daily"))
(defn test-one-of []
  (accepts (one-of user-name id-number) "root" 0)
  (refuses (one-of user-name id-number) "bad user" -1))
(defn test-optional [] (accepts (optional integer) None 1) (refuses (optional integer) "1"))
(defn test-list-of []
  (accepts (list-of line) [] ["a" "b"] #("a"))
  (refuses (list-of line) "a" ["a\nb"]))
(defn test-non-empty-list-of []
  (accepts (non-empty-list-of line) ["a"])
  (refuses (non-empty-list-of line) [] [1]))
(defn test-dict-of []
  (accepts (dict-of shell-identifier line) {} {"A" "1"})
  (refuses (dict-of shell-identifier line) {"A B" "1"} {"A" "x\ny"} ["A" "1"]))
(defn test-matching []
  (setv t (matching "even-digit" "one even digit" r"[02468]"))
  (accepts t "4")
  (refuses t "3" "44"))
(defn test-predicate []
  (setv t (predicate "even" "an even integer" (fn [v] (= (% v 2) 0))))
  (accepts t 2)
  (refuses t 3 "x"))

(defn test-refusal-says-what-was-expected-and-what-was-given []
  (assert (= (.explain file-mode "0640")
             "must be a file mode (an integer such as 0o640), not \"0640\"")
          (.explain file-mode "0640")))

(defn test-list-refusal-names-the-element []
  (setv problem (.explain (list-of package-name) ["nginx" "--version"]))
  (assert (.startswith problem "(element 1) must be a package name") problem))

(defparamtype port (int-range 1 65535) "a TCP port (1 to 65535)")

(defn test-defparamtype-names-a-site-type []
  (accepts port 22)
  (refuses port 0 70000)
  (assert (= (repr port) "port") (repr port))
  (assert (in "a TCP port" (.explain port 0)) (.explain port 0)))

(defn test-a-type-called-on-a-value-returns-it-or-raises []
  (assert (= (port 80) 80) "accepted value returned")
  (try (port 0)
       (assert False "0 is no port")
       (except [e ParameterTypeError]
         (assert (in "TCP port" (str e)) (str e)))))

(defn test-import-consfig-star-brings-the-types-one-of-not-a-hops []
  ;; A site that writes only `(import consfig *)` and then
  ;; `#^ (one-of user-name id-number)` must get the type that refuses 3.5.
  (setv site {})
  (hy.eval '(import consfig *) site)
  (setv their-one-of (get site "one_of"))
  (refuses (their-one-of (get site "user_name") (get site "id_number")) 3.5 "bad user"))

(defn test-import-consfig-star-leaves-the-consfig-modules-in-place []
  ;; `consfig.types.propspec` (the type) once replaced the module
  ;; `consfig.propspec` (now `consfig.model.propspec`) as an attribute of the
  ;; package, so that `consfig.propspec.read-propspec` failed after any
  ;; `(import consfig *)`.
  (import consfig types)
  (hy.eval '(import consfig *) {})
  (for [name ["propspec" "property" "host" "types" "data"]]
    (assert (isinstance (getattr consfig name) types.ModuleType)
            f"consfig.{name} is {(getattr consfig name)}, not the module")))
