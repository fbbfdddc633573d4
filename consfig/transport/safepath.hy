"Walking a path as root among users, without being led astray.

consfig runs as root on hosts where other users own directories, and a
symlink one of them plants can turn a root write into a write elsewhere:
`~/cfgdir -> /etc` makes a write to ~/cfgdir/x one to /etc/x.  The walk here
goes down a path one component at a time, each opened relative to the
directory before it with `O_NOFOLLOW`, and follows a symlink itself, by the
rule systemd adopted for its own safe walks after CVE-2018-6954:

- a symlink owned by root, or by the user consfig runs as, is followed;
- a symlink owned by any other user is followed only to something that
  user owns, else the walk is refused (`UnsafePath`), naming the link, the
  place it leads to and their owners;
- the last component is followed only when asked (FOLLOW), under the same
  rule.

The walk returns a descriptor of the directory the last component is in and
that component's name: the caller then opens, renames, chmods and chowns
through that descriptor, so nothing can be swapped in between the check and
the use.  The POSIX side of the same rule is `consfig.transport.hop.SAFE-WALK`."

(import errno
        os
        pwd
        stat
        consfig.errors [SymlinkNotFollowed UnsafePath])

(setv _DIR (| os.O_PATH os.O_DIRECTORY os.O_CLOEXEC)
      _NODE (| os.O_PATH os.O_NOFOLLOW os.O_CLOEXEC)
      ;; As the kernel's own limit on symlinks followed in one lookup.
      MAX-LINKS 40)

(defn _components [path]
  (lfor c (.split path "/") :if (and c (!= c ".")) c))

(defn _owner [uid]
  (try (+ (. (pwd.getpwuid uid) pw_name) f" (uid {uid})")
       (except [KeyError] f"uid {uid}")))

(defn _trusted [uid]
  (in uid #(0 (os.geteuid))))

(defn walk [path * [follow False]]
  "Walk to the directory that holds PATH's last component (an absolute
path), by the rule above, and return `#(dirfd name)`: an `O_PATH`
descriptor of that directory, which the caller closes, and the name of the
component in it (which may not exist).  With FOLLOW, symlinks at the end are
followed too, by the same rule.  Raise `UnsafePath` when a symlink leads
where it may not, `FileNotFoundError` or `NotADirectoryError` when a
directory on the way is missing or is not one."
  (setv fd (os.open "/" _DIR)
        stack (list (reversed (_components path)))
        ;; Each entry: #(depth link-path uid): once the walk is back to
        ;; DEPTH components left, it has reached what that link leads to.
        pending []
        real []
        links 0)
  (defn settle [st]
    (while (and pending (= (get pending -1 0) (len stack)))
      (setv #(_ link uid) (.pop pending))
      (when (!= st.st_uid uid)
        (raise (UnsafePath path (+ f"{link} is a symlink owned by {(_owner uid)} that leads to "
                                   f"/{(.join "/" real)}, owned by {(_owner st.st_uid)}"))))))
  (try
    (while stack
      (setv name (.pop stack))
      (when (= name "..")
        (setv up (os.open ".." _DIR :dir_fd fd))
        (os.close fd)
        (setv fd up)
        (when real (.pop real))
        (settle (os.fstat fd))
        (continue))
      (setv last (not stack))
      (try
        (setv child (os.open name _NODE :dir_fd fd))
        (except [FileNotFoundError]
          (when last
            ;; What a link leads to does not exist yet: whoever owns the
            ;; directory it would be made in decides.
            (setv pending (lfor p pending #(0 #* (cut p 1 None))))
            (settle (os.fstat fd))
            (return #(fd name)))
          (raise (FileNotFoundError errno.ENOENT
                                    f"no directory /{(.join "/" [#* real name])} on the way to {path}"))))
      (setv st (os.fstat child))
      (cond
        (stat.S_ISLNK st.st_mode)
        (do (when (and last (not follow))
              (os.close child)
              (return #(fd name)))
            (+= links 1)
            (when (> links MAX-LINKS)
              (os.close child)
              (raise (OSError errno.ELOOP f"too many symlinks on the way to {path}")))
            (setv target (os.readlink "" :dir_fd child)
                  link (+ "/" (.join "/" [#* real name])))
            (os.close child)
            (when (.startswith target "/")
              (os.close fd)
              (setv fd (os.open "/" _DIR)
                    real []))
            (when (not (_trusted st.st_uid))
              (.append pending #((len stack) link st.st_uid)))
            (.extend stack (reversed (_components target)))
            (settle (os.fstat fd)))
        last
        (do (os.close child)
            (.append real name)
            (settle st)
            (return #(fd name)))
        (not (stat.S_ISDIR st.st_mode))
        (do (os.close child)
            (raise (NotADirectoryError errno.ENOTDIR
                                       f"/{(.join "/" [#* real name])} is not a directory, on the way to {path}")))
        True
        (do (os.close fd)
            (setv fd child)
            (.append real name)
            (settle st))))
    ;; The path was "/" (or resolved to it): its parent is itself.
    #(fd ".")
    (except [BaseException]
      (os.close fd)
      (raise))))

(defn open-node [dirfd name path]
  "An `O_PATH` descriptor of NAME in DIRFD, never a symlink it names:
`SymlinkNotFollowed` when it is one."
  (setv fd (os.open name _NODE :dir_fd dirfd))
  (when (stat.S_ISLNK (. (os.fstat fd) st_mode))
    (os.close fd)
    (raise (SymlinkNotFollowed path)))
  fd)

(defn chmod-node [dirfd name path mode]
  "Give NAME in DIRFD (not a symlink: `SymlinkNotFollowed`) the mode MODE."
  (setv fd (open-node dirfd name path))
  (try
    ;; Linux has no fchmod for an O_PATH descriptor; its /proc link reaches
    ;; the very inode, whatever has become of the name since.
    (os.chmod f"/proc/self/fd/{fd}" mode)
    (except [FileNotFoundError]
      ;; No /proc (a bare chroot): open the node for reading, and change it
      ;; only if it is still the one the walk found.
      (setv rfd (os.open name (| os.O_RDONLY os.O_NOFOLLOW os.O_NONBLOCK os.O_CLOEXEC)
                         :dir_fd dirfd))
      (try
        (setv a (os.fstat fd) b (os.fstat rfd))
        (when (!= #(a.st_dev a.st_ino) #(b.st_dev b.st_ino))
          (raise (UnsafePath path "it was replaced while its mode was being changed")))
        (os.fchmod rfd mode)
        (finally (os.close rfd))))
    (finally (os.close fd))))

(setv _SUBDIR (| os.O_RDONLY os.O_DIRECTORY os.O_NOFOLLOW os.O_CLOEXEC))

(defn can-remove-trees? []
  "Whether this Python can remove a tree through descriptors
(`remove-tree`): `openat`, `unlinkat` and `fdopendir`, as
`shutil.rmtree.avoids_symlink_attacks` asks."
  (and (in os.open os.supports-dir-fd) (in os.unlink os.supports-dir-fd)
       (in os.rmdir os.supports-dir-fd) (in os.scandir os.supports-fd)))

(defn remove-tree [dirfd name path]
  "Remove the directory NAME in DIRFD with everything in it, holding a
descriptor of every directory it empties, as `shutil.rmtree` does where
`avoids_symlink_attacks` (and refused where that cannot be done): no name
is looked up but in a directory held open, and none is followed, so no
link swapped in anywhere in the tree leads the removal out of it.  Like
`rm --one-file-system` it does not go into another file system: a
directory there is left, and an `OSError` says so once the rest is gone."
  (when (not (can-remove-trees?))
    (raise (OSError errno.ENOTSUP
                    f"not removing {path}: this Python cannot remove a tree through descriptors")))
  (setv top (os.open name _SUBDIR :dir_fd dirfd)
        dev (. (os.fstat top) st_dev)
        ;; Each entry: #(fd of a directory, its entries still to see, the
        ;; fd of its parent, its name there).
        stack [#(top (os.scandir top) dirfd name)]
        skipped [])
  (defn descend [fd name]
    ;; Into the directory NAME in FD; False when NAME is no longer one.
    (try (setv sub (os.open name _SUBDIR :dir_fd fd))
         (except [e OSError]
           (when (in e.errno #(errno.ELOOP errno.ENOTDIR)) (return False))
           (raise)))
    (if (= (. (os.fstat sub) st_dev) dev)
        (.append stack #(sub (os.scandir sub) fd name))
        (do (os.close sub)
            (.append skipped (.join "/" [path #* (lfor s (cut stack 1 None) (get s 3)) name]))))
    True)
  (try
    (while stack
      (setv #(fd entries parent here) (get stack -1)
            entry (next entries None))
      (cond
        (is entry None)
        (do (.pop stack)
            (.close entries)
            (os.close fd)
            (try (os.rmdir here :dir_fd parent)
                 (except [OSError] (when (not skipped) (raise)))))
        (and (.is-dir entry :follow-symlinks False) (descend fd entry.name))
        None
        True
        ;; Not a directory, or no longer one (a link swapped in): its name
        ;; goes, never what it leads to.  One that became a directory since
        ;; is gone into after all.
        (try (os.unlink entry.name :dir_fd fd)
             (except [IsADirectoryError]
               (descend fd entry.name)))))
    (finally
      (for [#(fd entries _ _) stack]
        (.close entries)
        (os.close fd))))
  (when skipped
    (raise (OSError errno.EXDEV (+ "not removed, on another file system: " (.join ", " skipped))
                    path))))

(defn make-directories [path]
  "Make the directory PATH and its missing parents (`mkdir -p`), each made
with `mkdirat` in a directory the walk holds; the walk's rule applies to
every symlink on the way, and to one at PATH itself."
  (setv comps (_components path))
  (for [i (range 1 (+ (len comps) 1))]
    (setv #(fd name) (walk (+ "/" (.join "/" (cut comps i)))))
    (try
      (when (not-in name #("." ".."))
        (try (os.mkdir name 0o777 :dir_fd fd)
             (except [FileExistsError] None)))
      (finally (os.close fd))))
  (setv #(fd name) (walk path :follow True))
  (try
    (os.close (os.open name (| os.O_PATH os.O_DIRECTORY os.O_NOFOLLOW os.O_CLOEXEC) :dir_fd fd))
    (except [NotADirectoryError]
      (raise (FileExistsError errno.EEXIST "exists and is not a directory" path)))
    (finally (os.close fd))))

(export :objects [walk open-node chmod-node remove-tree make-directories can-remove-trees?])
