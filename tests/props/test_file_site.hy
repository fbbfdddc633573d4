;; Templates and files of the site (file.templated, file.copied-from-site):
;; a real site consfig in a temporary directory, deployed over :local.

(require consfig *)
(import json
        os
        pytest
        consfig *
        consfig.data.items [reset-data-sources]
        consfig.site.load [load-consfig]
        proptest [LOCAL statuses])

(defn spit [p s]
  (os.makedirs (os.path.dirname p) :exist-ok True)
  (with [f (open p "w")] (.write f s)))
(defn slurp [p] (with [f (open p)] (.read f)))
(defn mode-of [p] (& (. (os.stat p) st_mode) 0o7777))

(defn [(pytest.fixture :autouse True)] no-sources []
  (reset-data-sources)
  (yield)
  (reset-data-sources))

(defn site [root body]
  "Write a site consfig at ROOT/consfig.hy whose one host, site.test, has
the properties BODY, with a :files-tree source at ROOT/data; load it and
return the host."
  (spit (os.path.join root "consfig.hy")
        (+ "(require consfig *)\n(import consfig *)\n"
           "(use-props consfig.props [file])\n"
           "(try-register-data-source :files-tree :location \"data\")\n"
           "(defhost site.test {:deploy :local}\n" body ")\n"))
  (os.makedirs (os.path.join root "data") :exist-ok True)
  (get (. (load-consfig (os.path.join root "consfig.hy")) __dict__) "site"))

(defn deployed [host #** kw]
  (setv events [])
  (setv outcome (deploy* [(hy.models.Keyword "local")] host :sink (fn [e] (.append events e)) #** kw))
  #(outcome events))

(defn test-template-sees-host-data-and-vars [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "out" "motd")))
  (spit (os.path.join root "templates" "motd.j2")
        "{{ hostname }} {{ greeting }} {{ data('_all', 'banner') }}{{ hostattr('os') is none }}\n")
  (spit (os.path.join root "data" "_all" "banner") "BANNER")
  (os.makedirs (os.path.dirname dest))
  (setv host (site root f"(file.templated {(json.dumps dest)} \"templates/motd.j2\" :vars {{:greeting \"hi\"}})"))
  (setv #(outcome events) (deployed host))
  (assert (= outcome.status "changed") (statuses events))
  (assert (= (slurp dest) "site.test hi BANNERTrue\n") (slurp dest))
  (assert (= (. (get (deployed host) 0) status) "no-change") "idempotent")
  (spit (os.path.join root "data" "_all" "banner") "NEW")
  (setv #(outcome events) (deployed host :check True))
  (setv diff (lfor e events :if (= (get e "event") "diff") (get e "text")))
  (assert (and diff (in "+site.test hi NEWTrue" (get diff 0))) f"check mode shows the diff: {diff}")
  (assert (= (slurp dest) "site.test hi BANNERTrue\n") "check mode changed nothing"))

(defn test-template-text-is-not-in-the-propspec [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "f")))
  (spit (os.path.join root "t.j2") "RENDERED-TEXT {{ 1 + 1 }}\n")
  (setv host (site root f"(file.templated {(json.dumps dest)} \"t.j2\")"))
  (import consfig.model.host [preprocess-host])
  (setv prepared (preprocess-host host))
  (assert (not-in "RENDERED" (hy.repr prepared.propspec)) (hy.repr prepared.propspec))
  (deployed host)
  (assert (= (slurp dest) "RENDERED-TEXT 2\n") "rendered"))

(defn test-template-undefined-variable-is-one-error-before-connecting [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "never")))
  (spit (os.path.join root "templates" "x.conf.j2") "a\n{% if True %}\nport = {{ prot }}\n{% endif %}\n")
  (setv host (site root f"(file.templated {(json.dumps dest)} \"templates/x.conf.j2\" :vars {{:port 80}})"))
  (with [e (pytest.raises ConsfigError)]
    (deploy* [[(hy.models.Keyword "ssh") (hy.models.Keyword "host") "unreachable.invalid"]] host
             :sink (fn [e] None)))
  (setv text (str e.value))
  (assert (in "x.conf.j2:3" text) text)
  (assert (in "undefined variable 'prot'" text) text)
  (assert (not (os.path.exists dest)) "nothing written"))

(defn test-template-reading-a-secret-is-a-secret [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "db.conf")))
  (spit (os.path.join root "db.conf.j2") "password={{ data('site.test', 'db-password') }}\n")
  (spit (os.path.join root "data" "site.test" "db-password") "s3cr3t-value")
  (setv host (site root (+ "(file.templated " (json.dumps dest) " \"db.conf.j2\")\n"
                           "(file.templated " (json.dumps (+ dest ".2")) " \"db.conf.j2\" :mode 0o640)")))
  ;; A template can only know it read a secret if the source says so: here
  ;; the item is made one by a declaration of it as a secret.
  (spit (os.path.join root "consfig.hy")
        (.replace (slurp (os.path.join root "consfig.hy")) "(defhost site.test {:deploy :local}\n"
                  "(import consfig.data.items [require-data])\n(defprop needs-secret :posix [] (:hostattrs (require-data \"site.test\" \"db-password\" :secret True)))\n(defhost site.test {:deploy :local}\n(needs-secret)\n"))
  (setv host (get (. (load-consfig (os.path.join root "consfig.hy")) __dict__) "site"))
  (setv #(outcome events) (deployed host :check True))
  (assert (not-in "s3cr3t" (str events)) (str events))
  (setv #(outcome events) (deployed host))
  (assert (= (slurp dest) "password=s3cr3t-value\n") "rendered")
  (assert (not-in "s3cr3t" (str events)) "not in the events")
  (assert (not (lfor e events :if (= (get e "event") "diff") e)) "no diff")
  (assert (= (mode-of dest) 0o600) "mode 0600 by default")
  (assert (= (mode-of (+ dest ".2")) 0o640) "or as told"))

(defn test-relative-template-needs-a-site [tmp-path]
  (import proptest [deploy-propspec])
  (import consfig.props [file])
  (with [e (pytest.raises ConsfigError)]
    (deploy-propspec LOCAL (file.templated (str (/ tmp-path "x")) "t.j2")))
  (assert (in "relative path" (str e.value)) (str e.value)))

(defn test-site-tree-copied-with-delete [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "srv" "www")))
  (spit (os.path.join root "files" "www" "index.html") "<p>hi</p>\n")
  (spit (os.path.join root "files" "www" "css" "site.css") "p {}\n")
  (spit (os.path.join dest "stale.html") "old\n")
  (setv host (site root f"(file.copied-from-site {(json.dumps dest)} \"files/www\" :mode 0o644 :delete True)"))
  (setv #(outcome events) (deployed host))
  (assert (= outcome.status "changed") (statuses events))
  (assert (= (sorted (os.listdir dest)) ["css" "index.html"]) (os.listdir dest))
  (assert (= (slurp (os.path.join dest "css" "site.css")) "p {}\n") "copied")
  (assert (= (mode-of (os.path.join dest "css")) 0o755) "directory mode from :mode")
  (assert (= (. (get (deployed host) 0) status) "no-change") "idempotent")
  (spit (os.path.join root "files" "www" "index.html") "<p>new</p>\n")
  (setv #(outcome events) (deployed host :check True))
  (assert (in "index.html would be updated" (str events)) (str events))
  (deployed host)
  (assert (= (slurp (os.path.join dest "index.html")) "<p>new</p>\n") "updated"))

(defn test-check-mode-shows-the-diff-of-each-file-of-a-tree-that-would-change [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "srv" "www")))
  (spit (os.path.join root "files" "www" "index.html") "<p>hi</p>\n")
  (spit (os.path.join root "files" "www" "same.html") "same\n")
  (spit (os.path.join dest "index.html") "<p>old</p>\n")
  (spit (os.path.join dest "same.html") "same\n")
  (setv host (site root f"(file.copied-from-site {(json.dumps dest)} \"files/www\")")
        #(outcome events) (deployed host :check True)
        diffs (dfor e events :if (= (get e "event") "diff")
                    (os.path.basename (get e "path")) (get e "text")))
  (assert (= (sorted diffs) ["index.html"]) f"a diff for the file that differs only: {diffs}")
  (assert (and (in "-<p>old</p>" (get diffs "index.html")) (in "+<p>hi</p>" (get diffs "index.html")))
          (get diffs "index.html"))
  (assert (= (slurp (os.path.join dest "index.html")) "<p>old</p>\n") "check mode changed nothing"))

(defn test-check-mode-shows-the-first-diffs-of-a-large-tree-and-counts-the-rest [tmp-path]
  (setv root (str tmp-path)
        dest (str (/ tmp-path "srv" "many")))
  (for [i (range 25)]
    (spit (os.path.join root "files" "many" f"f{i :02}") f"{i}\n"))
  (setv host (site root f"(file.copied-from-site {(json.dumps dest)} \"files/many\")")
        #(outcome events) (deployed host :check True)
        diffs (lfor e events :if (= (get e "event") "diff") (get e "path")))
  (assert (= (len diffs) 20) f"20 diffs shown: {diffs}")
  (assert (in "5 more file(s) would change (diffs not shown)" (str events)) (str events))
  (assert (not (os.path.exists dest)) "check mode created nothing"))

(defn test-site-file-missing-is-an-error-before-connecting [tmp-path]
  (setv root (str tmp-path))
  (setv host (site root "(file.copied-from-site \"/srv/x\" \"files/nothing-here\")"))
  (with [e (pytest.raises ConsfigError)]
    (deploy* [[(hy.models.Keyword "ssh") (hy.models.Keyword "host") "unreachable.invalid"]] host
             :sink (fn [e] None)))
  (assert (in "nothing-here does not exist" (str e.value)) (str e.value)))

(defn test-a-host-deployed-from-a-target-gets-its-templates-and-trees [tmp-path]
  ;; inner.test's :hostattrs run again on the target that deploys it, where
  ;; there is no site directory and perhaps no jinja2: what was rendered and
  ;; read on the controller travels with the host instead.
  (setv root (str tmp-path)
        dest (str (/ tmp-path "out")))
  (spit (os.path.join root "t.j2") "{{ hostname }} {{ n }}\n")
  (spit (os.path.join root "tree" "a") "a\n")
  (os.makedirs dest)
  (spit (os.path.join root "consfig.hy")
        (+ "(require consfig *)\n(import consfig *)\n"
           "(use-props consfig.props [file])\n"
           "(defhost inner.test {:deploy :local}\n"
           f"  (file.templated {(json.dumps (+ dest "/t"))} \"t.j2\" :vars {{:n 1}})\n"
           f"  (file.copied-from-site {(json.dumps (+ dest "/tree"))} \"tree\"))\n"
           "(defhost outer.test {:deploy :local}\n"
           "  (deploys :local \"inner.test\"))\n"))
  (setv outer (get (. (load-consfig (os.path.join root "consfig.hy")) __dict__) "outer"))
  (setv events [])
  (setv outcome (deploy* [(hy.models.Keyword "local") (hy.models.Keyword "python")] outer
                         :sink (fn [e] (.append events e))))
  (assert (= outcome.status "changed") (str (lfor e events :if (.get e "message") (get e "message"))))
  (assert (= (slurp (os.path.join dest "t")) "inner.test 1\n") "rendered on the controller")
  (assert (= (slurp (os.path.join dest "tree" "a")) "a\n") "copied"))
