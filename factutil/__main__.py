"""``python -m factutil`` runs the command line."""

from factutil.cli import main

main()
