"""``python -m opencheckpoint`` runs the command line (Ctrl-C handled from here on: :mod:`.cli.entry`)."""

from .cli.entry import run

run()
