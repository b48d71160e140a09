"""A worker SIGKILLed mid-turn: the turn lease expires, reconcile reruns the turn from its last
checkpoint on another worker, every message enters memory once, and the dead turn's token is
refused. Two workers of this module's own on a private queue, signalled by pid."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import inbox_lines, spawn
from tests.support.timescale import scaled
from tests.support.waiting import wait_until
from tests.support.workers import workers_on_own_queue

TTL_S = scaled(TeamOptions().heartbeat_ttl_s, floor_s=1.5)


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_workers(
    redis_server: str, queue: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWorkers]:
    with workers_on_own_queue(
        redis_server, queue, 2, tmp_path_factory.mktemp("mate-kill-logs")
    ) as group:
        yield group


class HeldSecondCall:
    """Alice's model: step 1 sends the lead a message, step 2 hangs until released (its worker
    is killed meanwhile), the rerun's step answers."""

    def __init__(self) -> None:
        self.calls = 0
        self.second = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.calls += 1
        if self.calls == 1:
            return ToolCalls([("send_message", {"to": "lead", "content": "step one done"})])
        if self.calls == 2:
            self.second.set()
            self.release.wait(60)
            return "answer nobody reads"
        return "recovered"


def holder_pids(store: TeamStore, name: str) -> tuple[int, int]:
    """The pid of the job process running the teammate's turn, and of its rq worker."""
    worker = store.get(name).worker
    assert worker
    horse = int(worker.rsplit(":", 1)[1])
    parent = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return horse, parent


@pytest.mark.realistic  # at 1x: the default 30 s turn lease
def test_killed_turn_reruns_from_its_checkpoint_without_loss_or_doubles(
    redis_server: str, own_workers: LocalWorkers, queue: str, llm: ScriptedLLM
) -> None:
    team = f"k{uuid.uuid4().hex[:10]}"
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    store = TeamStore(conn, team)
    store.create(TeamOptions(heartbeat_ttl_s=TTL_S))
    model = HeldSecondCall()
    # Model calls of 3.5-10.5 s at 1x, as real providers' (the kill is tested at the defaults
    # with slow models too); the second is held on top of that until the worker is killed.
    alice = llm.script(f"alice-{team}", handler=model, latency_s=scaled(7), latency_seed=3)
    assert spawn(redis_server, team, "alice", alice, llm.api_base, "--queue", queue).exit_code == 0
    assert model.second.wait(60)
    store.messages.send("lead", "alice", "m1")  # injected nowhere yet: the hung step 2 predates it
    dead_token = store.get("alice").turn_token
    memory_before = store.turns.memory("alice")
    horse, parent = holder_pids(store, "alice")
    assert parent in [p.pid for p in own_workers.processes if p.poll() is None]
    os.kill(parent, signal.SIGKILL)
    os.kill(horse, signal.SIGKILL)
    model.release.set()
    store.messages.send("lead", "alice", "m2")
    # No turn lease once the TTL passes: reconcile enqueues the rerun (exactly once).
    # (The lease lapses a TTL after its last refresh; reconcile also wants a TTL unseen.)
    assert wait_until(
        lambda: store.scheduler.reconcile(), 2 * TTL_S + 15, message="reconcile to rerun alice"
    ) == ["alice"]
    wait_until(lambda: store.get("alice").status is TeammateStatus.IDLE, 60, message="alice idle")

    memory = store.turns.memory("alice")
    assert memory[: len(memory_before)] == memory_before  # the rerun resumed from the checkpoint
    assert [m["content"] for m in inbox_lines(memory)] == ["m1", "m2"]
    assert [m["role"] for m in memory] == ["user", "assistant", "tool", "user", "assistant"]
    assert memory[-1]["content"] == "recovered"
    assert model.calls == 3
    # The send committed before the kill is not repeated by the rerun.
    sent = [
        m for m in store.messages.kept("lead") if m.from_ == "alice" and m.type == "peer.message"
    ]
    assert [m.content for m in sent] == ["step one done"]
    teammate = store.get("alice")
    assert (teammate.idle_reason, teammate.attempts, teammate.last_error) == ("done", 0, None)
    # The dead turn's writes are refused and change nothing.
    assert dead_token and dead_token != teammate.turn_token
    assert not store.turns.checkpoint(
        "alice", dead_token, "", [{"role": "user", "content": "stale"}]
    )
    assert store.turns.end_turn("alice", dead_token, "done", "stale") == "stale"
    assert store.turns.memory("alice") == memory
