"""model: what a host is and what is to hold on it.  Parameter-typed
properties and propapps (`property`), propspecs as code and as data
(`propspec`), defhost and hostattrs (`host`), facts and other hosts' reads
(`fact`), the watch specs a property declares (`watchspec`), and the
current host and connection (`context`).

May import: the ground and transport (a host names its chain).
"""
