-- runs: what a run's own scripts share.

-- Run statuses that end a run (RunStatus.finished in shared/runs/run_records.py).
local RUN_ENDED = {completed = true, failed = true, cancelled = true}
