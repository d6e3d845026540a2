"""`python -m rideout` runs the CLI."""

from rideout.cli import main

main()
