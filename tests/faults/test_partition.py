"""A worker on another host, then cut off: two network namespaces joined by a veth pair stand
for the Redis host and a second host. Its task is reclaimed and finished on the Redis host, and
its late write is refused and counted when the link returns; nothing is lost or doubled.

Redis lives in namespace A (the Redis host), listening on the veth address for the other host
and on a unix socket for this test, the coordinator and the Redis host's worker (unix sockets are
not bound to a network namespace). The worker in namespace B reaches the scripted model server
through a forwarder on B's loopback and a unix socket."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process, worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL
from tests.support.hosts import TwoHosts, redis_host
from tests.support.llm import ScriptedLLM, Slow
from tests.support.runs import next_token
from tests.support.waiting import wait_until

HEARTBEAT_TTL_S = 4.0


def team_toml(path: Path, models: dict[str, str]) -> Path:
    path.write_text(
        "\n".join(
            [
                'team_id = "partition"',
                f'model = "{models["member"]}"',
                f'planner = {{ model = "{models["planner"]}", queue = "remote" }}',
                f'synthesizer = {{ model = "{models["synth"]}", queue = "remote" }}',
                "[[members]]",
                'id = "m1"',
                'queue = "remote"',
                "[options]",
                f"heartbeat_ttl_s = {HEARTBEAT_TTL_S}",
            ]
        )
        + "\n"
    )
    return path


def test_a_partitioned_worker_is_reclaimed_and_its_late_write_refused(
    two_hosts: TwoHosts, llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    plan = [{"id": "a", "memberId": "m1", "task": "A"}]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        # The cut-off worker's call outlasts the cut, the reclaim and the redo.
        "member": llm.script(
            f"member-{run_id}", [Slow("from the cut-off host", 45), "from the Redis host"]
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    team = team_toml(tmp_path / "team.toml", models)
    coordinators: list[subprocess.Popen[bytes]] = []
    with redis_host(two_hosts, llm) as host:
        local = LocalWorkers(host.local_url, ["remote"], 1, tmp_path / "local-logs")
        try:
            conn, local_url = host.conn, host.local_url
            with (tmp_path / "remote-worker.log").open("wb") as log:
                host.processes.append(
                    two_hosts.exec(
                        two_hosts.b,
                        worker_command(host.remote_url, ["remote"]),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
            wait_until(lambda: len(conn.smembers("rq:workers")) == 1, 60, message="remote worker")
            with (tmp_path / "coordinator.log").open("wb") as log:
                coordinator = subprocess.Popen(
                    [
                        *TEAMCTL,
                        "run",
                        "Ship it",
                        "--team",
                        str(team),
                        "--api-base",
                        llm.api_base,
                        "--redis-url",
                        local_url,
                        "--workers",
                        "0",
                        "--run-id",
                        run_id,
                        "--json",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=log,
                )
            coordinators.append(coordinator)
            board = TaskBoard(conn, RunKeys(run_id))
            wait_until(
                lambda: (t := board.get("a")) and t.status is TaskStatus.IN_PROGRESS,
                90,
                message="the remote worker to claim a",
            )
            remote_claim = board.get("a")
            wait_until(
                lambda: len(llm.requests[f"member-{run_id}"]) == 1,
                60,
                message="the remote member's model call",
            )

            two_hosts.cut()
            local.start()  # the Redis host's worker: it takes the task once it is reclaimed

            out, _ = coordinator.communicate(timeout=180)
            assert coordinator.returncode == 0, (tmp_path / "coordinator.log").read_text()
            two_hosts.restore()
            wait_until(
                lambda: board.get("a").stale_writes >= 1,
                90,
                message="the cut-off worker's late write to be refused",
            )

            result = json.loads(out)
            assert result["status"] == "completed" and result["output"] == "the answer"
            a = board.get("a")
            assert (a.status, a.output, a.attempts) == (
                TaskStatus.COMPLETED,
                "from the Redis host",
                2,
            )
            # The Redis host's worker took it with the run's next token.
            assert a.worker != remote_claim.worker and a.token == next_token(remote_claim.token)
            types = [m.type for m in MessageBus(conn, RunKeys(run_id)).messages()]
            assert types.count("task.result") == 1 and types.count("run.complete") == 1
        finally:
            local.stop()
            for coordinator in coordinators:
                stop_process(coordinator)
