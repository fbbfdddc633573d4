"Where no service may start: what a connection says, and the
/usr/sbin/policy-rc.d files consfig writes on Debian and derivatives.

A hop into a system that is not running (`:chroot`) puts a reason in its
connection's connattr `no-services`; every hop after it runs inside
that same system, so the whole chain is asked, and a `:python` hop passes
the answer on to the Python it starts.

invoke-rc.d, through which package scripts start and stop services, asks
policy-rc.d first; exit code 101 means \"action forbidden\".  Two contents
are consfig's own, and each side recognises both: `FORBID-ALL`, which a host
keeps (`service.no-services`) or a `service.without-starting-services` puts
there for a while, and `WHILE-CHROOTED`, which a `:chroot` hop puts there
for its duration and removes when it closes."

(setv POLICY-RC-D "/usr/sbin/policy-rc.d")

(setv FORBID-ALL "#!/bin/sh\n# Written by consfig: no service may be started now.\nexit 101\n")

(setv WHILE-CHROOTED (+ "#!/bin/sh\n# Written by consfig while it works in this chroot: "
                        "no service may be started.\nexit 101\n"))

(defn no-services-reason [conn]
  "Why no service may start over CONN (\"in a chroot\"), from the connattrs
of it or of any hop it runs inside; None when nothing in its chain says so."
  (while (is-not conn None)
    (setv why (.get conn.connattrs "no-services"))
    (when why (return (if (isinstance why str) why "here")))
    (setv conn conn.upstream))
  None)

(export :objects [POLICY-RC-D FORBID-ALL WHILE-CHROOTED no-services-reason])
