"""Run a team from Python and read the typed result.

With no REDIS_URL and no model configured this uses the embedded defaults, as `teamctl run`
does: a private Redis, the built-in offline model, and a warm pool of local workers.

    .venv/bin/python examples/run_a_team.py
"""

import sys

from teamctl import Member, RunStatus, Team

team = Team(
    members=[
        Member(id="researcher", description="finding and checking facts"),
        Member(id="writer", description="clear, concise writing"),
    ],
    options={"max_concurrency": 2},
)
result = team.run("Plan a one-day offsite for a team of eight")

print(f"status: {result.status.value}")
for state in result.task_states:
    print(f"{state.task_id}: {state.status.value}")
print(f"tokens: {result.usage.prompt_tokens + result.usage.completion_tokens}")
print(result.output)
sys.exit(0 if result.status is RunStatus.COMPLETED else 1)  # a script that checks its run
