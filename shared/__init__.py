"""Code shared by the coordinator and the workers: models, keys, board, bus, model client."""
