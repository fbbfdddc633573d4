"Groups of the site's hosts, as other hosts see them.

A load balancer's backends, a monitoring server's targets, a cluster's
peers: a file on one host that lists the hosts of a group, built on the
controller from the hosts the site defines and their hostattrs, the way
Puppet's exported resources are collected."

(eval-when-compile (require consfig.model.propspec [defpropspec]))
(import string [Formatter]
        consfig.errors [PropspecError]
        consfig.model.host [get-hostattr hosts-in-group]
        consfig.props.file :as file
        consfig.types *)

(setv host-group (matching "host-group" "a group name (no whitespace, not starting with @ or !)"
                           r"[^\s@!:][^\s:]*"))

(defn _fields [template]
  (lfor [_ field _ _] (.parse (Formatter) template) :if (is-not field None) field))

(defn _host-line [template hostname]
  ;; TEMPLATE with each {NAME} replaced by the host's newest hostattr NAME.
  (setv values {"hostname" hostname})
  (for [field (_fields template)]
    (when (not-in field values)
      (setv value (get-hostattr hostname field))
      (when (is value None)
        (raise (PropspecError f"{hostname} has no hostattr \"{field}\" for {{{field}}} in {template !r}")))
      (setv (get values field) (str value))))
  (setv line (.format-map template values))
  (when (any (gfor c "\n\r\x00" (in c line)))
    (raise (PropspecError f"{hostname}: the line for it, {line !r}, is not one line")))
  line)

(defn group-lines [group [line "{hostname}"]]
  "One LINE for each host of GROUP, in the order the hosts were defined:
LINE is a format string in which `{hostname}` is the host's name and
`{NAME}` the newest value of its hostattr NAME."
  (lfor hostname (hosts-in-group group) (_host-line line hostname)))

(defpropspec listed-in-file :posix [#^ abs-path path #^ host-group group
                                    * #^ line [line "{hostname}"] #^ text [header ""]
                                    #^ text [footer ""] #^ file-mode [mode None]]
  "PATH lists the hosts of GROUP — every host the site defines that is in
it, declared (`{:groups [\"web\"]}`) or pushed as hostattr `groups` — one
LINE for each, in the order the hosts were defined, between HEADER and
FOOTER (text, each ending with a newline if it is to be a line of its own).
LINE is a format string: `{hostname}` is the host's name, `{NAME}` the
newest value of its hostattr NAME (a host without it is an error naming
it), `{{` and `}}` are braces:

  (hostgroup.listed-in-file \"/etc/haproxy/backends.cfg\" \"web\"
    :line \"    server {hostname} {hostname}:8080 check\"
    :header \"backend web\\n\")

The file is the group's: a host leaving the group leaves the file.  Apply
what reads the file after it, with `on-change` (`(on-change (hostgroup.listed-in-file …)
(cmd.single \"systemctl\" \"reload\" \"haproxy\"))`)."
  (:desc f"{path} lists the hosts of group {group}")
  (:invariant (not (any (gfor f (_fields line) (or (not f) (.isdigit f)))))
              "LINE names each field, e.g. {hostname}, never {} or {0}")
  (file.has-content path (+ header (.join "" (gfor l (group-lines group line) (+ l "\n"))) footer)
                    :mode mode))

(export :objects [listed-in-file group-lines host-group])
