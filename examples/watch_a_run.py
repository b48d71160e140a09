"""Start a run without blocking, watch its events as they happen, then take its result.

.venv/bin/python examples/watch_a_run.py
"""

import sys

from teamctl import RunStatus, Team

run = Team().start("Compare Redis streams and Kafka for a small team")
print(f"started {run.run_id}")
for event in run.events():  # task state changes and bus messages, in order, until the run ends
    print(event.kind, event.model_dump_json())
result = run.wait(timeout=300)
print(f"{len(result.member_results)} tasks ran")
print(f"status: {result.status.value}")
sys.exit(0 if result.status is RunStatus.COMPLETED else 1)  # a script that checks its run
