"""python -m consfig: the consfig command."""

from consfig.ui.cli import run

run()
