"""The `teamctl` command line: click commands, options, views, export and local workers."""

from teamctl.coordinator.cli.app import main

__all__ = ["main"]
