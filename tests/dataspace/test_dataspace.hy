;; The dataspace (consfig.model.dataspace, consfig.props.dataspace): typed
;; records asserted by hosts into a real etcd (Debian's etcd-server, started
;; on a loopback port by the `etcd` fixture), observed by others with
;; `during`, applied for real over :local.

(require consfig *)
(import os.path sys)
;; proptest, the property tests' helpers, for `checks-clean`.
(.insert sys.path 0 (os.path.join (os.path.dirname __file__) ".." "props"))
(import consfig *
        proptest [checks-clean]
        consfig.apply.dataspace [Dataspace]
        consfig.model.dataspace [json->record]
        consfig.site.load [load-consfig]
        base64
        json
        os
        subprocess)
(use-props consfig.props [dataspace])

(setv PREFIX "/consfig/test")

(defn site-text [etcd out #* hosts]
  (+ "(require consfig *)\n(import consfig *)\n(use-props consfig.props [dataspace file])\n"
     f"(defdataspace {{:endpoints {(hy.repr etcd.endpoints)} :prefix \"{PREFIX}\" :ttl 4}})\n"
     "(defassertion web-backend [#^ hostname host #^ ip-address addr #^ port port]\n"
     "  \"A web server taking the site's requests.\")\n"
     "(defproplist backend-file [#^ ip-address addr #^ port port]\n"
     f"  (file.exists-with-content f\"{out}/{{addr}}\" f\"server {{addr}}:{{port}};\\n\"))\n"
     "(defproplist upstream-file [#^ (list-of (dict-of string anything)) backends]\n"
     f"  (file.has-content \"{out}/upstream.conf\"\n"
     "    (+ \"upstream app {\\n\" (.join \"\" (gfor b backends f\"  server {(get b \"addr\")}:{(get b \"port\")};\\n\")) \"}\\n\")))\n"
     (.join "\n" hosts) "\n"))

(defn backend [name addr [port 8080]]
  f"(defhost {name} {{}} (dataspace.asserted (web-backend \"{name}\" \"{addr}\" {port})))")

(setv OBSERVER "(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :addr ?addr :port ?port))
    (backend-file ?addr ?port)))"
      COLLECTOR "(defhost lb.example.org {}
  (during (dataspace.collected (web-backend :addr ?addr :port ?port) ?backends)
    (upstream-file ?backends)))")

(defn load-site [tmp-path text]
  (setv f (/ tmp-path "site.hy"))
  (.write-text f text)
  (load-consfig (str f)))

(defn deploy-host [site name events * [unapply False] [check False] [diff False]]
  (deploy* [:local] (find-host name) :sink events :unapply unapply :check check :diff diff))

(defn check-host-clean [name]
  "The site's host NAME, as deployed, checks clean: nothing would change."
  (checks-clean [:local] (find-host name))
  None)

(defn keys-under [etcd prefix]
  ;; etcd's own view, through etcdctl: not through the code under test.
  (setv r (subprocess.run ["etcdctl" "--endpoints" (.join "," etcd.endpoints) "get" "--prefix"
                           "--keys-only" prefix]
                          :capture-output True :text True :timeout 30
                          :env {#** os.environ "ETCDCTL_API" "3"}))
  (assert (= r.returncode 0) r.stderr)
  (lfor l (.splitlines r.stdout) :if l l))

(defn etcdctl [etcd #* args]
  (setv r (subprocess.run ["etcdctl" "--endpoints" (.join "," etcd.endpoints) #* args]
                          :capture-output True :text True :timeout 30
                          :env {#** os.environ "ETCDCTL_API" "3"}))
  (assert (= r.returncode 0) (+ r.stdout r.stderr))
  r.stdout)

(defn out-dir [tmp-path]
  (setv d (/ tmp-path "out"))
  (.mkdir d :exist-ok True)
  d)

(defn texts [events]
  (lfor e events.events :if (in (get e "event") #("output" "diff")) (get e "text")))

(defn consfig-error [tmp-path text]
  (try (load-site tmp-path text)
       (except [e ConsfigError] (return (str e))))
  (assert False "the consfig loaded without error"))

;; Records and patterns, at load

(defn test-a-record-prints-as-hy-and-reads-back-equal [tmp-path etcd]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path)))
        rec (site.web-backend "web1.example.org" "10.0.0.5" 8080)
        text (propspec->string rec))
  (assert (.endswith text ".web-backend \"web1.example.org\" \"10.0.0.5\" 8080)") text)
  (assert (= (read-propspec text) rec) "reads back equal"))

(defn test-a-field-of-the-wrong-type-is-refused-at-load-with-file-and-line [tmp-path etcd]
  (setv msg (consfig-error tmp-path (site-text etcd (out-dir tmp-path) (backend "web1.example.org" "10.0.0.x"))))
  (assert (in "site.hy:12:" msg) msg)
  (assert (in "web-backend: addr must be an IPv4 or IPv6 address" msg) msg))

(defn test-a-defassertion-with-an-untyped-field-is-refused [tmp-path]
  (setv msg (consfig-error tmp-path "(require consfig *)\n(defassertion thing [#^ hostname host port])"))
  (assert (in "defassertion thing: each field is `#^ TYPE NAME`, not port" msg) msg))

(defn test-a-pattern-with-a-literal-of-the-wrong-type-is-refused-at-load [tmp-path etcd]
  (setv msg (consfig-error tmp-path (site-text etcd (out-dir tmp-path)
                                               "(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :port \"http\")) (file.has-content \"/tmp/x\" \"\")))")))
  (assert (in "site.hy:13:" msg) msg)
  (assert (in "web-backend: port must be a TCP or UDP port" msg) msg))

(defn test-a-pattern-naming-no-field-of-the-record-is-refused-at-load [tmp-path etcd]
  (setv msg (consfig-error tmp-path (site-text etcd (out-dir tmp-path)
                                               "(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :adress ?a)) (file.has-content \"/tmp/x\" ?a)))")))
  (assert (in "unknown keyword :adress for web-backend; did you mean :addr?" msg) msg))

(defn test-a-binder-the-pattern-does-not-bind-is-refused-at-load [tmp-path etcd]
  (setv msg (consfig-error tmp-path (site-text etcd (out-dir tmp-path)
                                               "(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :addr ?addr)) (backend-file ?addr ?port)))")))
  (assert (in "site.hy:13:" msg) msg)
  (assert (in "?port is not bound by the dataspace has" msg) msg))

(defn test-observing-in-a-site-without-a-dataspace-says-what-to-add [tmp-path]
  (setv msg (consfig-error tmp-path "(require consfig *)\n(import consfig *)\n(use-props consfig.props [dataspace file])
(defassertion web-backend [#^ hostname host])
(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :host ?h)) (file.has-content \"/tmp/x\" ?h)))"))
  (assert (in "site.hy:6:" msg) msg)
  (assert (in "this site names no dataspace: add (defdataspace {:endpoints" msg) msg))

(defn test-a-pattern-prints-with-its-binders-and-wildcard-and-reads-back [tmp-path etcd]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) OBSERVER))
        p (propapp (dataspace.observed (site.web-backend :host _ :addr ?addr :port 8080)))
        text (propspec->string p))
  (assert (in ".web-backend :host _ :addr ?addr :port 8080))" text) text)
  (assert (= (read-propspec text) p) "reads back equal")
  (assert (= (data->propspec (json.loads (json.dumps (propspec->data p)))) p) "through JSON"))

;; Asserting

(defn test-an-asserted-record-is-in-etcd-under-the-hosts-prefix-bound-to-a-lease [tmp-path etcd events]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) (backend "web1.example.org" "10.0.0.5"))))
  (assert (= (. (deploy-host site "web1.example.org" events) failures) 0) (texts events))
  (setv keys (keys-under etcd PREFIX))
  (assert (= (len keys) 1) keys)
  (assert (.startswith (get keys 0) f"{PREFIX}/hosts/web1.example.org/") keys)
  (setv kv (get (json.loads (etcdctl etcd "get" (get keys 0) "-w" "json")) "kvs" 0))
  (assert (.get kv "lease") f"bound to a lease: {kv}")
  (setv stored (json.loads (base64.b64decode (get kv "value"))))
  (assert (= (json->record (json.dumps (get stored "record")))
             (site.web-backend "web1.example.org" "10.0.0.5" 8080))
          stored))

(defn test-asserting-again-changes-nothing [tmp-path etcd events]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) (backend "web1.example.org" "10.0.0.5"))))
  (deploy-host site "web1.example.org" events)
  (setv again (deploy-host site "web1.example.org" events))
  (assert (= again.status "no-change") (texts events))
  (check-host-clean "web1.example.org"))

(defn test-an-unapplied-assertion-is-withdrawn [tmp-path etcd events]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) (backend "web1.example.org" "10.0.0.5"))))
  (deploy-host site "web1.example.org" events)
  (assert (= (. (deploy-host site "web1.example.org" events :unapply True) failures) 0) (texts events))
  (assert (= (keys-under etcd PREFIX) []) "withdrawn"))

(defn test-an-assertion-dies-with-its-hosts-lease [tmp-path etcd events]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) (backend "web1.example.org" "10.0.0.5"))))
  (deploy-host site "web1.example.org" events)
  (setv kv (get (json.loads (etcdctl etcd "get" "--prefix" PREFIX "-w" "json")) "kvs" 0))
  ;; What a host that is gone amounts to: its lease ends.
  (etcdctl etcd "lease" "revoke" (format (get kv "lease") "x"))
  (assert (= (keys-under etcd PREFIX) []) "gone with the lease"))

;; Observing: a facet per match

(defn test-a-during-over-observed-holds-its-properties-once-per-match-with-binders-bound
  [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5")
                                            (backend "web2.example.org" "10.0.0.6" 8081) OBSERVER)))
  (deploy-host site "web1.example.org" events)
  (deploy-host site "web2.example.org" events)
  (assert (= (. (deploy-host site "lb.example.org" events) failures) 0) (texts events))
  (assert (= (.read-text (/ out "10.0.0.5")) "server 10.0.0.5:8080;\n") "first facet")
  (assert (= (.read-text (/ out "10.0.0.6")) "server 10.0.0.6:8081;\n") "second facet")
  (check-host-clean "lb.example.org"))

(defn test-a-facet-is-retracted-with-its-assertion [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5")
                                            (backend "web2.example.org" "10.0.0.6") OBSERVER)))
  (deploy-host site "web1.example.org" events)
  (deploy-host site "web2.example.org" events)
  (deploy-host site "lb.example.org" events)
  (deploy-host site "web2.example.org" events :unapply True)
  (assert (= (. (deploy-host site "lb.example.org" events) failures) 0) (texts events))
  (assert (.exists (/ out "10.0.0.5")) "the other facet stays")
  (assert (not (.exists (/ out "10.0.0.6"))) "retracted: file.exists-with-content unapplied removes it"))

(defn test-a-literal-in-the-pattern-selects-the-matches [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5" 8080)
                                            (backend "web2.example.org" "10.0.0.6" 9090)
                                            "(defhost lb.example.org {}
  (during (dataspace.observed (web-backend :addr ?addr :port 9090 :host _))
    (backend-file ?addr 9090)))")))
  (deploy-host site "web1.example.org" events)
  (deploy-host site "web2.example.org" events)
  (deploy-host site "lb.example.org" events)
  (assert (= (sorted (os.listdir out)) ["10.0.0.6"]) (os.listdir out)))

;; The set form

(defn test-the-set-form-gives-one-property-every-match-sorted [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web2.example.org" "10.0.0.6")
                                            (backend "web1.example.org" "10.0.0.5") COLLECTOR)))
  (deploy-host site "web2.example.org" events)
  (deploy-host site "web1.example.org" events)
  (assert (= (. (deploy-host site "lb.example.org" events) failures) 0) (texts events))
  (assert (= (.read-text (/ out "upstream.conf"))
             "upstream app {\n  server 10.0.0.5:8080;\n  server 10.0.0.6:8080;\n}\n")
          (.read-text (/ out "upstream.conf")))
  (check-host-clean "lb.example.org"))

(defn test-the-set-form-is-reapplied-not-retracted-when-the-set-changes [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web2.example.org" "10.0.0.6")
                                            (backend "web1.example.org" "10.0.0.5") COLLECTOR)))
  (deploy-host site "web2.example.org" events)
  (deploy-host site "web1.example.org" events)
  (deploy-host site "lb.example.org" events)
  (deploy-host site "web2.example.org" events :unapply True)
  (deploy-host site "lb.example.org" events)
  (assert (= (.read-text (/ out "upstream.conf")) "upstream app {\n  server 10.0.0.5:8080;\n}\n")
          (.read-text (/ out "upstream.conf"))))

(defn test-the-set-form-in-check-mode-shows-the-diff-and-changes-nothing [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5")
                                            (backend "web2.example.org" "10.0.0.6") COLLECTOR)))
  (deploy-host site "web1.example.org" events)
  (deploy-host site "lb.example.org" events)
  (deploy-host site "web2.example.org" events)
  (setv before (.read-text (/ out "upstream.conf"))
        outcome (deploy-host site "lb.example.org" events :check True :diff True))
  (assert (= (.read-text (/ out "upstream.conf")) before) "nothing changed")
  (assert (any (gfor t (texts events) (in "+  server 10.0.0.6:8080;" t))) (texts events)))

;; What does not fit never reaches a property

(defn test-a-value-that-is-not-a-record-is-refused-naming-its-key-and-writer
  [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5") OBSERVER)))
  (deploy-host site "web1.example.org" events)
  (setv rogue f"{PREFIX}/hosts/evil.example.org/x/y")
  (etcdctl etcd "put" rogue (json.dumps {"record" {"propapp" (. (find-property "consfig.props.file.has-content") name)
                                                   "args" ["/etc/passwd" "owned"]}}))
  (etcdctl etcd "put" f"{PREFIX}/hosts/evil.example.org/x/z"
           (json.dumps {"record" {"propapp" site.web-backend.name "args" ["h" "$(reboot)" 80]}}))
  (assert (= (. (deploy-host site "lb.example.org" events) failures) 0) (texts events))
  (setv refused (lfor t (texts events) :if (in "dataspace: refused" t) t))
  (assert (= (len refused) 2) (texts events))
  (assert (in f"{rogue} (written by evil.example.org)" (get refused 0)) refused)
  (assert (in "is not a record type this site defines" (get refused 0)) refused)
  (assert (in "addr must be an IPv4 or IPv6 address" (get refused 1)) refused)
  (assert (= (sorted (os.listdir out)) ["10.0.0.5"]) (os.listdir out)))

(defn test-a-value-that-is-not-utf-8-is-refused [tmp-path etcd events]
  (setv site (load-site tmp-path (site-text etcd (out-dir tmp-path) OBSERVER))
        ds (Dataspace {"endpoints" etcd.endpoints "prefix" PREFIX}))
  (ds.put f"{PREFIX}/hosts/evil.example.org/x/y" b"\xff\xfe" 0)
  (setv outcome (deploy-host site "lb.example.org" events))
  (assert (any (gfor t (texts events) (and (in "written by evil.example.org" t) (in "not UTF-8" t))))
          (texts events)))

;; Losing the dataspace

(defn test-with-etcd-gone-an-observer-keeps-its-last-view-and-says-why [tmp-path etcd events]
  (setv out (out-dir tmp-path)
        site (load-site tmp-path (site-text etcd out (backend "web1.example.org" "10.0.0.5") OBSERVER)))
  (deploy-host site "web1.example.org" events)
  (deploy-host site "lb.example.org" events)
  (etcd.stop 0)
  (.clear events.events)
  (setv outcome (deploy-host site "lb.example.org" events))
  (assert (= outcome.status "failed") "an observer that cannot see fails, so that someone looks")
  (assert (in "dataspace unavailable: http://127.0.0.1:" (str events.events)) events.events)
  (assert (.exists (/ out "10.0.0.5")) "retracted nothing"))
