;; file properties, over :local in a temporary directory (fast) and in the
;; Debian chroot for what needs other users.

(require consfig *)
(import os
        pytest
        consfig.errors [PropspecError]
        proptest [LOCAL apply-twice deploy-propspec diffs statuses unapply in-chroot])
(use-props consfig.props [file])

;; No newline: a path with one is refused where it is written (see
;; tests/props/test_injection.hy); the connection still carries one
;; (tests/connections/test_chains.py).
(setv HOSTILE ["plain" "with space" "quo'te\"s" "$(touch pwned)"
               "-leading-dash" "semi;colon&amp" "back\\slash" "star*?"])

(defn slurp [p] (with [f (open p)] (.read f)))
(defn spit [p s] (with [f (open p "w")] (.write f s)))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-has-content-hostile-names [tmp-path name]
  (setv p (str (/ tmp-path name))
        events (apply-twice LOCAL (file.has-content p "one\ntwo\n")))
  (assert (= (slurp p) "one\ntwo\n") "content written")
  (assert (= (len (diffs events)) 1) "one diff event")
  (assert (not (os.path.exists (/ tmp-path "pwned"))) "no shell injection")
  (assert (= (sorted (os.listdir tmp-path)) [name]) "no temporary file left over"))

(defn test-has-content-keeps-mode-and-diffs [tmp-path]
  (setv p (str (/ tmp-path "f")))
  (spit p "old\n")
  (os.chmod p 0o600)
  (setv #(_ events) (deploy-propspec LOCAL (file.has-content p ["new" "lines"])))
  (assert (= (slurp p) "new\nlines\n") "list of lines")
  (assert (= (& (. (os.stat p) st_mode) 0o777) 0o600) "mode kept")
  (setv text (get (diffs events) 0 "text"))
  (assert (and (in "-old" text) (in "+new" text)) text))

(defn test-inline-secret-content-is-refused-pointing-to-the-data-layer [tmp-path]
  (for [prop [file.has-content file.exists-with-content]]
    (with [e (pytest.raises PropspecError)]
      (prop (str (/ tmp-path "secret")) "hunter2\n" :secret True))
    (assert (in "secret-uploaded" (str e.value)) (str e.value))
    (assert (in "docs/data.md" (str e.value)) (str e.value))
    (assert (not-in "hunter2" (str e.value)) "the refusal does not show the content")))

(defn test-exists-with-content-unapply-deletes [tmp-path]
  (setv p (str (/ tmp-path "new file")))
  (apply-twice LOCAL (file.exists-with-content p "x\n"))
  (unapply LOCAL (file.exists-with-content p "x\n"))
  (assert (not (os.path.exists p)) "deleted"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-contains-and-lacks-lines [tmp-path name]
  (setv p (str (/ tmp-path name)))
  (spit p "a\nb")
  (apply-twice LOCAL (file.contains-lines p "b" "c" ["d" "c"]))
  (assert (= (slurp p) "a\nb\nc\nd\n") (slurp p))
  (unapply LOCAL (file.contains-lines p "c" "d"))
  (assert (= (slurp p) "a\nb\n") "unapplying contains-lines removes them")
  (apply-twice LOCAL (file.lacks-lines p "a"))
  (assert (= (slurp p) "b\n") "lacks-lines")
  (unapply LOCAL (file.lacks-lines p "a"))
  (assert (= (slurp p) "b\na\n") "unapplying lacks-lines adds them"))

(defn test-contains-lines-creates-file [tmp-path]
  (setv p (str (/ tmp-path "sub" "f")))
  (os.mkdir (/ tmp-path "sub"))
  (apply-twice LOCAL (file.contains-lines p "x"))
  (assert (= (slurp p) "x\n") "created"))

(defn test-lacks-lines-matching-and-regex-replaced [tmp-path]
  (setv p (str (/ tmp-path "conf")))
  (spit p "keep\ndrop me\nDROP\nkey=old old\n")
  (apply-twice LOCAL (file.lacks-lines-matching p "^drop" "^DROP$"))
  (assert (= (slurp p) "keep\nkey=old old\n") (slurp p))
  (apply-twice LOCAL (file.regex-replaced-lines p r"^key=old (\w+)" r"key=new \1"))
  (assert (= (slurp p) "keep\nkey=new old\n") (slurp p))
  (setv #(o _) (deploy-propspec LOCAL (file.lacks-lines-matching (str (/ tmp-path "absent")) "x")))
  (assert (= o.status "no-change") "a missing file lacks every line"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-has-mode [tmp-path name]
  (setv p (str (/ tmp-path name)))
  (spit p "")
  (os.chmod p 0o644)
  (apply-twice LOCAL (file.has-mode p 0o640))
  (assert (= (& (. (os.stat p) st_mode) 0o7777) 0o640) "mode"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-does-not-exist [tmp-path name]
  (setv p (str (/ tmp-path name)))
  (spit p "")
  (os.symlink "/nonexistent" (str (/ tmp-path "dangling")))
  (apply-twice LOCAL (file.does-not-exist p (str (/ tmp-path "dangling"))))
  (assert (= (os.listdir tmp-path) []) "both gone"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-directories [tmp-path name]
  (setv d (str (/ tmp-path name "sub" "dir")))
  (apply-twice LOCAL (file.directory-exists d))
  (assert (os.path.isdir d) "made with parents")
  (apply-twice LOCAL (file.containing-directory-exists (str (/ tmp-path name "x" "f"))))
  (assert (os.path.isdir (/ tmp-path name "x")) "containing directory")
  (spit (/ tmp-path name "sub" "dir" "f") "x")
  (apply-twice LOCAL (file.directory-does-not-exist (str (/ tmp-path name))))
  (assert (= (os.listdir tmp-path) []) "removed recursively"))

(defn test-directory-does-not-exist-refuses-symlink [tmp-path]
  (os.mkdir (/ tmp-path "real"))
  (spit (/ tmp-path "real" "precious") "x")
  (os.symlink (str (/ tmp-path "real")) (str (/ tmp-path "link")))
  (setv #(o events) (deploy-propspec LOCAL (file.directory-does-not-exist (str (/ tmp-path "link")))
                            :check False))
  (assert (= o.status "failed") "a symlink is not a directory")
  (assert (os.path.exists (/ tmp-path "real" "precious")) "target untouched"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-symlinked [tmp-path name]
  (setv link (str (/ tmp-path name))
        target (str (/ tmp-path (+ name ".target"))))
  (apply-twice LOCAL (file.symlinked :from link :to target))
  (assert (= (os.readlink link) target) "points at target")
  (apply-twice LOCAL (file.symlinked :from link :to "relative\nodd"))
  (assert (= (os.readlink link) "relative\nodd") "retargeted")
  (unapply LOCAL (file.symlinked :from link :to "relative\nodd"))
  (assert (not (os.path.lexists link)) "unapplied"))

(defn test-symlinked-refuses-to-replace-a-file [tmp-path]
  (setv p (str (/ tmp-path "f")))
  (spit p "data")
  (setv #(o _) (deploy-propspec LOCAL (file.symlinked :from p :to "/etc") :check False))
  (assert (= o.status "failed") "refused")
  (assert (= (slurp p) "data") "file kept"))

(defn [(pytest.mark.parametrize "name" HOSTILE)] test-is-copy-of [tmp-path name]
  (setv src (str (/ tmp-path (+ name ".src")))
        dest (str (/ tmp-path name)))
  (spit src "payload\n")
  (os.chmod src 0o604)
  (apply-twice LOCAL (file.is-copy-of dest src))
  (assert (= (slurp dest) "payload\n") "copied")
  (assert (= (& (. (os.stat dest) st_mode) 0o777) 0o604) "mode preserved")
  (spit src "changed\n")
  (apply-twice LOCAL (file.is-copy-of dest src))
  (assert (= (slurp dest) "changed\n") "recopied"))

(setv NO-FINAL-NEWLINE-EDITS
      {"contains-lines" #("a\nb" (fn [p] (file.contains-lines p "a")))
       "lacks-lines" #("a\nb" (fn [p] (file.lacks-lines p "c")))
       "regex-replaced-lines" #("a\nb" (fn [p] (file.regex-replaced-lines p "^x$" "y")))
       "contains-conf-space" #("a 1\nb 2" (fn [p] (file.contains-conf-space p "a" "1")))})

(defn [(pytest.mark.parametrize "editor" (list NO-FINAL-NEWLINE-EDITS))]
      test-line-edit-with-nothing-to-do-leaves-a-file-without-final-newline [tmp-path editor]
  ;; As Consfigurator: the lines are compared, not the text, so the
  ;; missing final newline is no reason to write.
  (setv p (str (/ tmp-path "f"))
        #(text edit) (get NO-FINAL-NEWLINE-EDITS editor))
  (spit p text)
  (setv #(o events) (deploy-propspec LOCAL (edit p) :check-mode True))
  (assert (= o.status "no-change") f"check mode says it would change: {(statuses events)}")
  (setv #(o events) (deploy-propspec LOCAL (edit p)))
  (assert (= o.status "no-change") f"applying changed it: {(statuses events)}")
  (assert (= (slurp p) text) (repr (slurp p))))

(defn test-contains-conf-space-uncomments [tmp-path]
  (setv p (str (/ tmp-path "sshd_config")))
  (spit p "# A comment\n#Port 22\nUseDNS  yes\n#PermitRootLogin prohibit-password\nX11Forwarding yes\nX11Forwarding yes\n")
  (apply-twice LOCAL (file.contains-conf-space p "Port" "2222" "X11Forwarding" "no"
                                               "Banner" "/etc/issue"))
  (assert (= (slurp p) (+ "# A comment\nPort 2222\nUseDNS  yes\n#PermitRootLogin prohibit-password\n"
                          "X11Forwarding no\n#X11Forwarding yes\nBanner /etc/issue\n"))
          (slurp p))
  (apply-twice LOCAL (file.contains-conf-space p {"UseDNS" "no"}))
  (assert (in "\nUseDNS  no\n" (slurp p)) "separator kept"))

(defn test-contains-conf-equals [tmp-path]
  (setv p (str (/ tmp-path "c.conf")))
  (spit p "a = 1\n# b = 2\nc=3\n")
  (apply-twice LOCAL (file.contains-conf-equals p "b" "two" "c" "3" "d" "4"))
  (assert (= (slurp p) "a = 1\nb = two\nc=3\nd = 4\n") (slurp p)))

(defn test-contains-conf-shell-quotes [tmp-path]
  (setv p (str (/ tmp-path "default")))
  (spit p "FOO=\"bar\"\n#OPTS=\"-x\"\n")
  (apply-twice LOCAL (file.contains-conf-shell p "FOO" "bar" "OPTS" "-a 'b' $(c)"))
  (setv lines (.splitlines (slurp p)))
  (assert (= (get lines 0) "FOO=\"bar\"") "equivalent quoting left alone")
  (import subprocess)
  (setv out (. (subprocess.run ["sh" "-c" ". \"$1\"; printf %s \"$OPTS\"" "sh" p]
                               :capture-output True :text True) stdout))
  (assert (= out "-a 'b' $(c)") f"the shell reads back the value, got {out !r}"))

(defn test-contains-ini-settings [tmp-path]
  (setv p (str (/ tmp-path "x.ini")))
  (spit p "; top comment\n[main]\nx = 1\n;y = 2\n\n[other]\nz=3\n")
  (apply-twice LOCAL (file.contains-ini-settings p ["main" "y" "5"] ["main" "new" "n"]
                                                 ["extra" "k" "v"] ["other" "z" "3"]))
  (assert (= (slurp p) (+ "; top comment\n[main]\nx = 1\ny = 5\nnew=n\n\n[other]\nz=3\n"
                          "\n[extra]\nk=v\n"))
          (slurp p)))

(defn [pytest.mark.chroot] test-has-ownership-in-chroot [debian-chroot chroot-chain]
  (in-chroot debian-chroot "touch '/tmp/o w n'")
  (apply-twice chroot-chain (file.has-ownership "/tmp/o w n" :user "nobody" :group "nogroup"))
  (assert (= (. (in-chroot debian-chroot "stat -c %U:%G '/tmp/o w n'") stdout) "nobody:nogroup\n")
          "owner and group")
  (apply-twice chroot-chain (file.has-ownership "/tmp/o w n" :group 0))
  (assert (= (. (in-chroot debian-chroot "stat -c %U:%G '/tmp/o w n'") stdout) "nobody:root\n")
          "group by number"))

(defn [pytest.mark.chroot] test-file-properties-through-chroot-hop [debian-chroot chroot-chain]
  (for [name HOSTILE]
    (setv p (+ "/root/" name))
    (apply-twice chroot-chain (file.has-content p "in the chroot\n"))
    (assert (= (slurp (+ (str debian-chroot) p)) "in the chroot\n") (repr name))
    (apply-twice chroot-chain (file.contains-conf-space p "Key" "value"))
    (apply-twice chroot-chain (file.symlinked :from (+ p ".link") :to p))
    (apply-twice chroot-chain (file.does-not-exist p (+ p ".link")))
    (assert (not (os.path.lexists (+ (str debian-chroot) p))) (repr name))))

(defn slurp-bytes [p] (with [f (open p "rb")] (.read f)))
(defn spit-bytes [p b] (with [f (open p "wb")] (.write f b)))

(defn test-has-content-compares-bytes-not-decoded-text [tmp-path]
  ;; Decoded with replacement, b"\xff\n" would read as "\ufffd\n" and pass.
  (setv p (str (/ tmp-path "f")))
  (spit-bytes p b"\xff\n")
  (setv #(o _) (deploy-propspec LOCAL (file.has-content p "\ufffd\n")))
  (assert (= o.status "changed") "an undecodable byte is not the replacement character")
  (assert (= (slurp-bytes p) (.encode "\ufffd\n" "utf-8")) (repr (slurp-bytes p))))

(defn test-has-content-writes-bytes-exactly [tmp-path]
  (setv p (str (/ tmp-path "blob")))
  (apply-twice LOCAL (file.has-content p b"\x00\xff\r\n\x1b[2J"))
  (assert (= (slurp-bytes p) b"\x00\xff\r\n\x1b[2J") (repr (slurp-bytes p))))

(defn test-line-edits-keep-every-other-byte [tmp-path]
  ;; Lines the property has no business with stay as they were, byte for
  ;; byte: undecodable bytes, form feeds, carriage returns.
  (setv p (str (/ tmp-path "conf")))
  (spit-bytes p b"\xff\xfeold\n\x0c\nkeep\r\nx\x85y\n")
  (apply-twice LOCAL (file.contains-lines p "new"))
  (assert (= (slurp-bytes p) b"\xff\xfeold\n\x0c\nkeep\r\nx\x85y\nnew\n") (repr (slurp-bytes p)))
  (apply-twice LOCAL (file.contains-conf-space p "Key" "v"))
  (assert (= (slurp-bytes p) b"\xff\xfeold\n\x0c\nkeep\r\nx\x85y\nnew\nKey v\n") (repr (slurp-bytes p))))

(defn [pytest.mark.chroot] test-bytes-compared-exactly-through-chroot-hop [debian-chroot chroot-chain]
  (setv p (+ (str debian-chroot) "/tmp/bytes"))
  (spit-bytes p b"\xff\n")
  (apply-twice chroot-chain (file.has-content "/tmp/bytes" "\ufffd\n"))
  (assert (= (slurp-bytes p) (.encode "\ufffd\n" "utf-8")) (repr (slurp-bytes p)))
  (apply-twice chroot-chain (file.has-content "/tmp/bytes" b"\xff\x00\n"))
  (assert (= (slurp-bytes p) b"\xff\x00\n") (repr (slurp-bytes p))))

(defn test-bytes-content-crosses-the-python-hop [tmp-path]
  (setv p (str (/ tmp-path "blob")))
  (apply-twice [(hy.models.Keyword "python")] (file.has-content p b"\xff\x00\n"))
  (assert (= (slurp-bytes p) b"\xff\x00\n") (repr (slurp-bytes p))))

(defn test-symlinked-compares-the-target-exactly [tmp-path]
  ;; A link to b"t\xff" read back lossily would look like one to "t\ufffd".
  (setv link (str (/ tmp-path "l")))
  (os.symlink b"t\xff" (os.fsencode link))
  (apply-twice LOCAL (file.symlinked :from link :to "t\ufffd"))
  (assert (= (os.readlink (os.fsencode link)) (.encode "t\ufffd" "utf-8"))
          (repr (os.readlink (os.fsencode link)))))

(defn [pytest.mark.chroot] test-symlinked-compares-exactly-through-chroot-hop [debian-chroot chroot-chain]
  (setv link (+ (str debian-chroot) "/tmp/l"))
  (os.symlink b"t\xff\n" (os.fsencode link))
  (apply-twice chroot-chain (file.symlinked :from "/tmp/l" :to "t\ufffd\n"))
  (assert (= (os.readlink (os.fsencode link)) (.encode "t\ufffd\n" "utf-8"))
          (repr (os.readlink (os.fsencode link)))))

(defn test-conf-pairs-of-odd-length-are-refused-where-they-are-written []
  (for [make [(fn [] (file.contains-conf-equals "/etc/x.conf" "a" "1" "b"))
              (fn [] (file.contains-conf-space "/etc/x.conf" "a"))]]
    (with [e (pytest.raises PropspecError)] (make))
    (assert (in "alternating keys and values" (str e.value)) (str e.value))))
