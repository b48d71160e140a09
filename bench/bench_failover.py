"""Fencing across a failover: what each way of keeping a token from being issued twice costs per
claim. The board's claim (its token carries the server's epoch, read with INFO inside the script)
against the same script issuing a bare counter (the baseline), and against the baseline followed by
`WAIT 1` for a replica before the claim is acknowledged, the other way to keep a promoted replica
from issuing a token again.

Run: .venv/bin/python -m bench.bench_failover [--repeats N]
Starts a throwaway primary and a replica of it on loopback and stops both by pid.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.redis.scripts import Scripts, sources
from teamctl.shared.task_records import TaskSpec

from bench.figures import BenchFigure, print_figures

TTL_S = 30.0
WAIT_TIMEOUT_MS = 1000
EPOCH_CALL = "fencing_token(tokens_key)"
BARE_CALL = "redis.call('INCR', tokens_key)"


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    claims: int
    repeats: int


FULL = Sizes(claims=2000, repeats=5)
SMOKE = Sizes(claims=20, repeats=1)


class BareCounterScripts(Scripts):
    """The board's scripts, except a claim whose token is the counter alone (no epoch)."""

    def __getitem__(self, name: str) -> object:
        if name != "claim":
            return super().__getitem__(name)
        script = self._scripts.get("bare-claim")
        if script is None:
            source = sources()["claim"]
            assert EPOCH_CALL in source, "claim.lua no longer issues tokens as this bench knows"
            script = self._scripts["bare-claim"] = self.conn.register_script(
                source.replace(EPOCH_CALL, BARE_CALL)
            )
        return script


def claims_us(
    conn: redis.Redis, scripts: Scripts, after: Callable[[], object], claims: int
) -> float:
    """Microseconds per claim of `claims` independent ready tasks, `after` run after each one."""
    board = TaskBoard(conn, RunKeys(f"f-{uuid.uuid4().hex[:8]}"), scripts)
    board.create([TaskSpec(id=f"t{i}", member_id="m1", task="x") for i in range(claims)])
    started = time.perf_counter()
    for i in range(claims):
        assert board.claim(f"t{i}", "m1", "bench:1", TTL_S) is not None
        after()
    return (time.perf_counter() - started) / claims * 1e6


def collect(sizes: Sizes) -> dict[str, float]:
    """Median microseconds per claim for each way, over `sizes.repeats` interleaved runs."""
    with throwaway_redis() as primary_url, throwaway_redis() as replica_url:
        conn = redis.Redis.from_url(primary_url, decode_responses=True)
        replica = redis.Redis.from_url(replica_url, decode_responses=True)
        port = conn.connection_pool.connection_kwargs["port"]
        replica.replicaof("127.0.0.1", port)
        deadline = time.monotonic() + 30
        while replica.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.05)  # a bench, not a test: the sync has no event to block on
        epoch, bare = Scripts(conn), BareCounterScripts(conn)

        def nothing() -> None:
            return None

        def wait_for_replica() -> None:
            assert conn.wait(1, WAIT_TIMEOUT_MS) == 1, "the replica did not acknowledge"

        runs: dict[str, list[float]] = {}
        for _ in range(sizes.repeats):
            runs.setdefault("bare", []).append(claims_us(conn, bare, nothing, sizes.claims))
            runs.setdefault("epoch", []).append(claims_us(conn, epoch, nothing, sizes.claims))
            runs.setdefault("wait", []).append(
                claims_us(conn, bare, wait_for_replica, sizes.claims)
            )
        replica.replicaof("no", "one")
    return {name: statistics.median(values) for name, values in runs.items()}


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def run(sizes: Sizes) -> list[BenchFigure]:
    """The board's claim and a claim followed by WAIT, each against the bare counter's."""
    data = collect(sizes)
    base = "claim, bare counter token"
    return [
        BenchFigure(
            name="claim, token with epoch (the board's)",
            value=data["epoch"],
            unit="us",
            baseline=data["bare"],
            baseline_name=base,
            goal="<= 1.25x",
            met=data["epoch"] <= 1.25 * data["bare"],
            note="two INFO calls in Lua",
        ),
        BenchFigure(
            name="claim, then WAIT 1 for the replica",
            value=data["wait"],
            unit="us",
            baseline=data["bare"],
            baseline_name=base,
            note="one more round trip, plus the replica's acknowledgement",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=FULL.repeats, help="runs per figure (median shown)"
    )
    args = parser.parse_args()
    print_figures(run(replace(FULL, repeats=args.repeats)))


if __name__ == "__main__":
    main()
