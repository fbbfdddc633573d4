"Where prerequisite data is kept between deployments: a directory of
versions per user, on the controller and on a target.

Both sides keep non-secret versions in the same layout, in the user's
consfig cache (`~/.cache/consfig/data`, or under $XDG_CACHE_HOME; mode
0700): a directory per item and a file (0600) per version, both named by
digests (`consfig.boot.data-entry`).  The controller keeps there what a
source was slow to make (a git snapshot); a target, what it was sent, so
that a version travels once (`consfig.data.transit`).  Writing a version
prunes the item's others; an item no deployment has used for `UNUSED-DAYS`
goes too.  Secrets are kept in neither: they travel in memory, each
deployment."

(import os
        consfig.boot [data-entry private-directory cache-directory]
        consfig.util [sha256-hex write-atomically]
        shutil
        time
        pwd)

;; An item a target has not been sent or used for this long is dropped from
;; its cache (a host that no longer needs it, an old chroot's).
(setv UNUSED-DAYS 30)

(defclass DataCache []
  "A directory of cached data versions (see the module's docstring), made
0700 if missing and refused when someone else could write to it."
  (defn __init__ [self root]
    (setv self.root root
          why (private-directory root (os.geteuid)))
    (when why
      (raise (OSError f"cannot keep data in {root}: {why}"))))

  (defn path [self iden1 iden2 version]
    "The file holding VERSION of (IDEN1, IDEN2)."
    (os.path.join self.root #* (data-entry iden1 iden2 version)))

  (defn load [self iden1 iden2 version [sha256 None]]
    "The cached content of VERSION of (IDEN1, IDEN2), or None when it is not
kept, or (its digest not SHA256) damaged, and so discarded."
    (setv path (.path self iden1 iden2 version))
    (try (with [f (open path "rb")] (setv content (.read f)))
         (except [OSError] (return None)))
    (when (and sha256 (!= (sha256-hex content) sha256))
      (try (os.unlink path) (except [OSError] None))
      (return None))
    content)

  (defn store [self iden1 iden2 version content]
    "Keep CONTENT as VERSION of (IDEN1, IDEN2), atomically, and forget the
item's other versions."
    (setv #(item name) (data-entry iden1 iden2 version)
          directory (os.path.join self.root item)
          why (private-directory directory (os.geteuid)))
    (when why (raise (OSError f"cannot keep data in {directory}: {why}")))
    (write-atomically (os.path.join directory name) content :mode 0o600)
    (for [other (os.listdir directory)]
      (when (!= other name)
        (try (os.unlink (os.path.join directory other)) (except [OSError] None)))))

  (defn used [self iden1 iden2]
    "Note that (IDEN1, IDEN2) was used now, so that `prune` keeps it."
    (try (os.utime (os.path.join self.root (get (data-entry iden1 iden2 "") 0)))
         (except [OSError] None)))

  (defn prune [self [days UNUSED-DAYS]]
    "Remove the items not used for DAYS."
    (setv limit (- (time.time) (* days 86400)))
    (for [item (os.listdir self.root)]
      (setv path (os.path.join self.root item))
      (try (when (< (. (os.lstat path) st-mtime) limit)
             (shutil.rmtree path))
           (except [OSError] None)))))

(defn cache-root []
  "The data cache of the user this process runs as (`data` in the consfig
cache, as `consfig.boot.cache-directory` finds it), or None when no cache
directory is safe."
  (setv uid (os.geteuid)
        #(path why) (cache-directory os.environ uid (. (pwd.getpwuid uid) pw-dir)))
  (when path (os.path.join path "data")))

(defn controller-cache []
  "The controller's `DataCache`, or None when it cannot have one."
  (setv root (cache-root))
  (when root
    (try (DataCache root)
         (except [OSError] None))))

(export :objects [UNUSED-DAYS DataCache cache-root controller-cache])
