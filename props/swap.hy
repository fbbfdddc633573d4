"Swap files: made, listed in /etc/fstab, and in use.

The running kernel is given the swap only where it is the system's own — not
in a chroot, not where services are not started (see `sysctl`), not in a
container, whose kernel is the machine's; there the file and its fstab line
are made, and it is used where the system boots a kernel of its own."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path watch-poll])
(import posixpath
        re
        consfig.apply.actions [NO-CHANGE Script output run]
        consfig.apply.engine [WOULD-CHANGE checking? inform]
        consfig.errors [FailedChange]
        consfig.props.file [combined-results map-file-lines remove-files]
        consfig.props.fstab [FSTAB]
        consfig.props.service [kernel-left-alone-where]
        consfig.types *)

(setv _UNITS {"K" 1024 "M" (** 1024 2) "G" (** 1024 3) "T" (** 1024 4)})

(defn size->bytes [size]
  "SIZE (bytes, or a string such as \"512M\" or \"2G\": binary units) in
bytes, or None when it is not one."
  (cond (and (isinstance size int) (not (isinstance size bool))) size
        (isinstance size str)
        (do (setv m (re.fullmatch r"([0-9]+)([KMGT])" size))
            (when m (* (int (.group m 1)) (get _UNITS (.group m 2)))))
        True None))

(setv swap-size (predicate "swap-size"
                           (+ "a size, a whole number of MiB: bytes (an integer), "
                              "or a string such as \"512M\" or \"2G\" (binary units K M G T)")
                           (fn [s] (setx n (size->bytes s)) (and n (> n 0) (= (% n (** 1024 2)) 0))))
      swap-path (matching "swap-path" "an absolute path, on one line, with no backslash"
                          r"/[^\n\r\x00\\]*[^/\n\r\x00\\]"))

(defn fstab-escaped [path]
  "PATH as a field of fstab (and /proc/swaps): whitespace as octal escapes."
  (re.sub r"[ \t]" (fn [m] (+ "\\" (format (ord (.group m 0)) "03o"))) path))

(defn _fstab-line [path]
  f"{(fstab-escaped path)} none swap sw 0 0")

(defn _swap-line? [line path]
  (setv fields (.split line))
  (and fields (= (get fields 0) (fstab-escaped path))))

;; What is at the path, for the check: its type, size, mode and owner, and
;; what blkid finds in it; then whether the kernel swaps on it.
(setv _STATE (.join "\n" ["if [ -L \"$1\" ] || { [ -e \"$1\" ] && [ ! -f \"$1\" ]; }; then echo other; exit; fi"
                          "if [ ! -e \"$1\" ]; then echo none; exit; fi"
                          "stat -c 'file %s %a %u' -- \"$1\""
                          "blkid -p -s TYPE -o value -- \"$1\" 2>/dev/null || echo unknown"]))

(defn _state [path]
  (setv lines (.splitlines (output (Script _STATE path) :timeout 60))
        kind (get (.split (get lines 0)) 0))
  (if (= kind "file")
      (let [[_ size mode uid] (.split (get lines 0))]
        {"kind" kind "size" (int size) "mode" (int mode 8) "uid" (int uid)
         "type" (if (> (len lines) 1) (.strip (get lines 1)) "unknown")})
      {"kind" kind}))

(defn active? [path]
  "Whether the running kernel swaps on PATH (it is in /proc/swaps)."
  (setv text (or (. (run "cat" "/proc/swaps" :check False :timeout 60) stdout) ""))
  (in (fstab-escaped path) (lfor l (cut (.splitlines text) 1 None) :if (.strip l) (get (.split l) 0))))

;; Made beside PATH and renamed over it once it is swap, so that an
;; interrupted run never leaves at PATH a file that is not; made with the
;; mode it keeps, since swap holds whatever memory held.
(setv _MAKE (.join "\n" ["set -e"
                         "umask 077"
                         "new=\"$1.consfig-new\""
                         "rm -f -- \"$new\""
                         "trap 'rm -f -- \"$new\"' EXIT"
                         "fallocate -l \"$2\" -- \"$new\" 2>/dev/null ||"
                         "  dd if=/dev/zero of=\"$new\" bs=1048576 count=\"$(($2 / 1048576))\" status=none"
                         "chmod 600 -- \"$new\""
                         "mkswap -- \"$new\" >/dev/null"
                         "mv -f -T -- \"$new\" \"$1\""
                         "trap - EXIT"]))

(defn _file-change [path size state]
  ;; What the file itself needs: "make", "mode", or None.  Anything at PATH
  ;; but a swap file is left alone: the path may be a mistake.
  (setv kind (get state "kind"))
  (cond (= kind "none") "make"
        (or (= kind "other") (!= (get state "type") "swap"))
        (raise (FailedChange f"{path} exists and is not a swap file; not replacing it"))
        (!= (get state "size") size) "make"
        (or (!= (get state "mode") 0o600) (!= (get state "uid") 0)) "mode"
        True None))

(defn _live [path]
  (setv where (kernel-left-alone-where))
  (cond where (do (inform f"{path} not used now: the running kernel is left alone ({where})")
                  NO-CHANGE)
        (active? path) NO-CHANGE
        (checking?) (do (inform f"{path} would be swapped on") WOULD-CHANGE)
        True (do (run "swapon" "--" path :timeout 300) None)))

(defn _ensure-file [path size]
  (setv change (_file-change path size (_state path)))
  (cond (not change) NO-CHANGE
        (checking?) (do (inform (if (= change "make")
                                    f"{path} would be made: {size} bytes of swap"
                                    f"{path} would get mode 0600, owner root"))
                        WOULD-CHANGE)
        (= change "mode") (do (run "chown" "root:root" "--" path) (run "chmod" "600" "--" path) None)
        True (do (when (and (not (kernel-left-alone-where)) (active? path))
                   (inform f"{path} is resized: swapping off it first")
                   (run "swapoff" "--" path :timeout 3600))
                 (run "mkdir" "-p" "--" (or (posixpath.dirname path) "/"))
                 (run (Script _MAKE path (str size)) :timeout 3600)
                 None)))

(defprop file-exists :posix [#^ swap-path path #^ swap-size size]
  "PATH is a swap file of SIZE (bytes, or a string such as \"2G\"): made
with fallocate (dd where the file system cannot), mode 0600, owned by root,
prepared with mkswap; /etc/fstab swaps on it at boot, and the running kernel
swaps on it now (see the module's documentation for where it is left
alone).  A file of another size is made anew, swapped off first if in use.
Unapplying swaps off it, removes its fstab line and the file."
  (:watch [(watch-path path) (watch-path FSTAB) (watch-poll 60)])
  (:simulates True)
  (:desc f"swap file {path} of {size}")
  (:apply
    (setv n (size->bytes size))
    (combined-results [(_ensure-file path n)
                       (map-file-lines FSTAB (fn [lines] (if (any (gfor l lines (= l (_fstab-line path))))
                                                             lines
                                                             (+ (lfor l lines :if (not (_swap-line? l path)) l)
                                                                [(_fstab-line path)])))
                                       :create True)
                       (_live path)]))
  (:unapply
    (combined-results
      [(cond (or (kernel-left-alone-where) (not (active? path))) NO-CHANGE
             (checking?) (do (inform f"{path} would be swapped off") WOULD-CHANGE)
             True (do (run "swapoff" "--" path :timeout 3600) None))
       (map-file-lines FSTAB (fn [lines] (lfor l lines :if (not (_swap-line? l path)) l)))
       (remove-files path)])))

(export :objects [file-exists active? size->bytes fstab-escaped])
