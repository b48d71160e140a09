"""The coordinator engine: plans a run, drives its rounds, synthesizes the answer (`cli/`: CLI)."""
