"""``python -m snakka`` runs the CLI (see snakka.cli)."""

from snakka.cli import main

main()
