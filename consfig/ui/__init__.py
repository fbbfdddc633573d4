"""ui: the ways in.  The `consfig` command (`cli`), the REPL (`repl`), and an
image's `__main__.py` (`image_main`).

May import: anything.
"""
