"""python -m consfig: the consfig command."""

from consfig.cli import run

run()
