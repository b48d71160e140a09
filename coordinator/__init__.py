"""The coordinator: plans a run, drives its rounds, synthesizes the answer, and the teamctl CLI."""
