"""Sphinx configuration: the Markdown pages of docs/ as a site, with MyST.

    sphinx-build -W -b html docs docs/_build/html

CI builds it with warnings as errors (tests/ui/test_docs_site.py), so a
broken link, a page left out of the index or a malformed page fails it.
"""

project = "consfig"
author = "consfig's authors"
copyright = "consfig's authors, GPL-3.0-or-later"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# Headings up to ### get anchors, as GitHub gives them: the pages link to
# each other's sections the same way in both.
myst_heading_anchors = 3
# Hy has a Pygments lexer; the shell and text blocks need none.
highlight_language = "text"
html_theme = "alabaster"
html_title = "consfig"
