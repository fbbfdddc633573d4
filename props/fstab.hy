"Entries of /etc/fstab.

An entry is one fstab line, such as \"UUID=… /srv ext4 defaults 0 2\"; entries
are matched to existing lines by their mount point, the second field."

(eval-when-compile (require consfig.model.property [defprop]))
(import consfig.model.watchspec [watch-path])
(import consfig.props.file [map-file-lines]
        consfig.types *)

(setv fstab-entry (matching "fstab-entry"
                            "an fstab line: source, mount point, type, options (and dump, pass), on one line"
                            r"[^\s#]\S*(?:[ \t]+\S+){3,5}"))

(setv FSTAB "/etc/fstab")

(defn _fields [line]
  (.split line))

(defn _mount-point [line]
  (setv fields (_fields line))
  (when (and (>= (len fields) 2) (not (.startswith (get fields 0) "#")))
    (get fields 1)))

(defn _merged [entry existing]
  ;; `none` as the source keeps the source already there, so that mount
  ;; options can be managed without writing a UUID into the consfig.
  (setv new (_fields entry) old (_fields existing))
  (if (and (= (get new 0) "none") (!= (get old 0) "none"))
      (.join " " [(get old 0) #* (cut new 1 None)])
      entry))

(defn merge-entries [lines entries]
  "LINES of an fstab with ENTRIES merged in: each line mounting on the mount
point of an entry becomes that entry; entries for other mount points are
appended."
  (setv pending (dfor e entries (_mount-point e) e)
        out [])
  (for [line lines]
    (setv point (_mount-point line))
    (if (in point pending)
        (.append out (_merged (.pop pending point) line))
        (.append out line)))
  (+ out (list (.values pending))))

(defprop has-entries :posix [#^ fstab-entry #* entries]
  "/etc/fstab has each of ENTRIES, fstab lines matched by their mount point:
an existing line for that mount point is replaced, except that an entry
whose source is `none` keeps the existing line's source; entries for new
mount points are appended.  Unapplying removes the lines for their mount
points."
  (:simulates True)
  (:watch [(watch-path FSTAB)])
  (:desc f"fstab entries for {(.join ", " (map _mount-point entries))}")
  (:apply (map-file-lines FSTAB (fn [lines] (merge-entries lines entries)) :create True))
  (:unapply
    (setv points (sfor e entries (_mount-point e)))
    (map-file-lines FSTAB (fn [lines] (lfor l lines :if (not-in (_mount-point l) points) l)))))

(export :objects [FSTAB merge-entries has-entries])
