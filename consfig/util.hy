"Small helpers every layer uses: keyword names and the text/bytes boundary.

Nothing here imports anything of consfig's, so any module may import it."

(import hy.models [Keyword])

(defn keyword-name [x]
  "The name a keyword or a keyword-like string stands for: `:foo` and
\":foo\" and \"foo\" give \"foo\"; anything else gives None."
  (cond (isinstance x Keyword) x.name
        (isinstance x str) (.lstrip x ":")
        True None))

(defn bytes->text [b]
  "Output of a command as text: UTF-8, undecodable bytes replaced; None is \"\"."
  (if (isinstance b bytes) (.decode b "utf-8" "replace") (or b "")))

(defn text->bytes [s]
  "Input for a command or a file as bytes (UTF-8); None stays None."
  (cond (is s None) None
        (isinstance s bytes) s
        True (.encode s "utf-8")))

(export :objects [keyword-name bytes->text text->bytes])
