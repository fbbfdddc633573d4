"""ui: the ways in.  The `consfig` command (`cli`), the REPL (`repl`), an
image's command line (`image_cli`) and its `__main__.py` (`image_main`),
and what the two command lines share (`command`).

May import: anything.
"""
