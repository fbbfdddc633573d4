;; consfig.site.files: rendering a site's templates and reading its trees, on
;; the controller.

(import os
        socket
        pytest
        consfig.site.files [TemplateProblem SiteFileProblem render-template tree-manifest])

(defn spit [p s]
  (os.makedirs (os.path.dirname p) :exist-ok True)
  (with [f (open p "w")] (.write f s)))

(defn problem [thunk]
  (with [e (pytest.raises TemplateProblem)] (thunk))
  (str e.value))

(defn test-a-template-keeps-its-text-and-final-newline [tmp-path]
  (setv t (str (/ tmp-path "t.j2")))
  (spit t "a {{ x }}\n{% for i in xs %}{{ i }},{% endfor %}\n")
  (assert (= (render-template t {"x" 1 "xs" [1 2]}) "a 1\n1,2,\n") "rendered as written"))

(defn test-keyword-variables-are-their-names [tmp-path]
  (setv t (str (/ tmp-path "t.j2")))
  (spit t "{{ port }}")
  (assert (= (render-template t {(hy.models.Keyword "port") 80}) "80") "{:port 80} gives port"))

(defn test-an-undefined-attribute-names-the-line [tmp-path]
  (setv t (str (/ tmp-path "t.j2")))
  (spit t "one\ntwo {{ site.nmae }}\n")
  (setv text (problem (fn [] (render-template t {"site" {"name" "x"}}))))
  (assert (in "t.j2:2:" text) text)
  (assert (in "has no attribute 'nmae'" text) text))

(defn test-an-undefined-variable-in-an-included-template-names-that-one [tmp-path]
  (spit (str (/ tmp-path "inc.j2")) "x\ny\n{{ missing }}\n")
  (spit (str (/ tmp-path "t.j2")) "{% include 'inc.j2' %}\n")
  (setv text (problem (fn [] (render-template (str (/ tmp-path "t.j2")) {}))))
  (assert (in "inc.j2:3: undefined variable 'missing'" text) text))

(defn test-a-syntax-error-names-the-line [tmp-path]
  (setv t (str (/ tmp-path "t.j2")))
  (spit t "a\nb\n{% if %}\n")
  (setv text (problem (fn [] (render-template t {}))))
  (assert (in "t.j2:3: template syntax error" text) text))

(defn test-a-missing-template-or-include-is-named [tmp-path]
  (assert (in "nothing.j2: no such template"
              (problem (fn [] (render-template (str (/ tmp-path "nothing.j2")) {}))))
          "the template")
  (spit (str (/ tmp-path "t.j2")) "{% include 'gone.j2' %}")
  (assert (in "the template it includes, gone.j2, does not exist"
              (problem (fn [] (render-template (str (/ tmp-path "t.j2")) {}))))
          "an include"))

(defn test-a-relative-template-outside-any-host-is-refused [tmp-path]
  (with [e (pytest.raises SiteFileProblem)]
    (render-template "t.j2" {}))
  (assert (in "give an absolute path" (str e.value)) (str e.value)))

(defn test-a-manifest-lists-files-directories-and-links [tmp-path]
  (setv root (str (/ tmp-path "tree")))
  (spit (os.path.join root "a") "a")
  (spit (os.path.join root "d" "b") "b")
  (os.chmod (os.path.join root "a") 0o640)
  (os.symlink "a" (os.path.join root "l"))
  (setv m (dfor e (tree-manifest root) (get e "path") e))
  (assert (= (sorted m) ["" "a" "d" "d/b" "l"]) (sorted m))
  (assert (= (get m "" "type") "dir") "the root itself")
  (assert (= (get m "a" "mode") 0o640) "modes")
  (assert (= (get m "a" "sha256")
             "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb")
          "content hashes")
  (assert (= (get m "l" "target") "a") "link targets")
  (assert (= (lfor e (tree-manifest (os.path.join root "a")) (get e "path")) [""])
          "a single file is its root"))

(defn test-a-manifest-refuses-what-is-no-file [tmp-path]
  (setv root (str (/ tmp-path "tree")))
  (os.makedirs root)
  (with [s (socket.socket socket.AF-UNIX)]
    (.bind s (os.path.join root "sock"))
    (with [e (pytest.raises SiteFileProblem)]
      (tree-manifest root)))
  (assert (in "neither a file, a directory nor a symlink" (str e.value)) (str e.value))
  (with [e (pytest.raises SiteFileProblem)]
    (tree-manifest (os.path.join root "none")))
  (assert (in "does not exist" (str e.value)) (str e.value)))

(defn test-a-manifest-refuses-a-name-that-is-not-utf-8 [tmp-path]
  (setv root (/ tmp-path "tree"))
  (os.makedirs root)
  (with [f (open (os.path.join (os.fsencode root) b"caf\xe9") "w")] (.write f "x"))
  (with [e (pytest.raises SiteFileProblem)]
    (tree-manifest (str root)))
  (assert (in "caf\\xe9: the names of a site's files must be UTF-8" (str e.value)) (str e.value)))
