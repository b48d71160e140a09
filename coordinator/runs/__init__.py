"""The coordinator of a planned run: plans it, drives its rounds, synthesizes the answer."""
