"""`python -m teamctl`: the command line, for a shell whose PATH lacks the `teamctl` script."""

from teamctl.coordinator.cli import main

main(prog_name="teamctl")
