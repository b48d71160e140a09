"""What the tests share: the scripted model server, team files, workers, runs, waiting, faults."""
