"""``python -m memroute.cli``."""

from memroute.cli import main

main()
