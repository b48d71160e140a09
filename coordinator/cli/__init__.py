"""The `teamctl` command line: click commands, options, views, export and local workers."""

from teamctl.coordinator.cli.app import main
from teamctl.coordinator.cli.lead_command import lead_command
from teamctl.coordinator.cli.team_commands import register

register(main)  # here, not in app.py: team_commands imports app, and imports stay acyclic
main.add_command(lead_command)

__all__ = ["main"]
