"""Redis failover: Sentinel URLs for teamctl and its workers, a run that outlives its primary,
fencing tokens a promoted replica never issues again, and the refusals an operator fixes
(READONLY, OOM, MISCONF) as one line each, against real redis-servers on loopback."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.errors import ConfigError, InfraError
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis import connection
from teamctl.shared.redis.connection import (
    OutageRetry,
    SentinelURL,
    connect,
    redacted,
    redis_errors_as_infra,
)
from teamctl.shared.task_records import TaskSpec

from tests.support.cli import TEAMCTL
from tests.support.faults import RestartableRedis
from tests.support.llm import ScriptedLLM
from tests.support.replies import member_answer
from tests.support.runs import token_number
from tests.support.sentinels import SentinelGroup
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, timing_options
from tests.support.waiting import wait_until

EXIT_DEADLINE_S = 180
PLAN = [{"id": "a", "memberId": "m1", "task": "A"}, {"id": "b", "memberId": "m2", "task": "B"}]


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    with RestartableRedis(tmp_path / "redis-data") as server:
        yield server


def client(server: RestartableRedis, outage_s: float = 0.0) -> redis.Redis:
    return redis.Redis(port=server.port, decode_responses=True, retry=OutageRetry(outage_s))


def test_a_sentinel_url_names_sentinels_service_db_and_credentials() -> None:
    url = (
        "rediss+sentinel://u:secret@10.0.0.1,10.0.0.2:26380,[::1]/cache/3"
        "?sentinel_password=s3&socket_timeout=2"
    )
    parsed = SentinelURL.parse(url)
    assert parsed is not None
    assert parsed.sentinels == [("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 26379)]
    assert parsed.service == "cache"
    assert parsed.primary_kwargs == {
        "username": "u",
        "password": "secret",
        "db": 3,
        "ssl": True,
        "socket_timeout": 2.0,
    }
    assert parsed.sentinel_kwargs["password"] == "s3"
    assert "secret" not in redacted(url) and "s3" not in redacted(url)
    assert SentinelURL.parse("redis://127.0.0.1:6379/0") is None
    for bad in ("redis+sentinel://h1,h2", "redis+sentinel://h1:port/svc", "redis+sentinel:///svc"):
        with pytest.raises(ConfigError, match="redis\\+sentinel://"):
            connect(bad)


def test_a_claim_on_a_cut_off_primary_never_shares_a_token_with_the_promoted_replica(
    tmp_path: Path, run_id: str
) -> None:
    # The replica is promoted while the old primary still takes writes (a partition, or writes
    # it acknowledged and never replicated): both start from the same counter.
    # (No AOF on the replica: redis-server 6.2 may ignore SIGTERM while the AOF rewrite that
    # follows a sync is running.)
    with (
        RestartableRedis(tmp_path / "primary") as primary,
        RestartableRedis(tmp_path / "replica", args=("--appendonly", "no")) as replica,
    ):
        old, new = client(primary), client(replica)
        old_board = TaskBoard(old, RunKeys(run_id))
        old_board.create([TaskSpec(id="t1", member_id="m1", task="x")])
        new.replicaof("127.0.0.1", primary.port)
        wait_until(
            lambda: (
                new.info("replication").get("master_link_status") == "up"
                and new.exists(RunKeys(run_id).task("t1"))
            ),
            30,
            message="the replica in sync",
        )
        new.replicaof("no", "one")

        lost = old_board.claim("t1", "m1", "cut-off:1", 30)
        fresh = TaskBoard(new, RunKeys(run_id)).claim("t1", "m1", "promoted:1", 30)
        assert lost is not None and fresh is not None
        assert token_number(lost) == token_number(fresh)  # the counter alone would collide
        assert lost != fresh
        new_board = TaskBoard(new, RunKeys(run_id))
        assert new_board.complete("t1", lost, "stale", 1) is WriteOutcome.STALE
        assert new_board.complete("t1", fresh, "good", 1) is WriteOutcome.APPLIED
        assert new_board.get("t1").output == "good"


def test_a_replica_is_refused_at_connect_and_its_refused_writes_say_what_to_fix(
    own_redis: RestartableRedis, run_id: str, tmp_path: Path
) -> None:
    conn = client(own_redis)
    TaskBoard(conn, RunKeys(run_id)).create([TaskSpec(id="t1", member_id="m1", task="x")])
    with RestartableRedis(tmp_path / "nobody") as nobody:
        nobody_port = nobody.port
    conn.replicaof("127.0.0.1", nobody_port)  # a replica of nobody: read-only, keeps its data
    with pytest.raises(ConfigError, match="read-only replica; point REDIS_URL at the primary"):
        connect(own_redis.url)
    for write in (
        lambda: conn.set("k", "v"),  # READONLY as such
        lambda: TaskBoard(conn, RunKeys(run_id)).claim("t1", "m1", "w:1", 30),
    ):
        with (
            pytest.raises(InfraError, match="points at a read-only replica") as caught,
            redis_errors_as_infra(),
        ):
            write()
        assert "\n" not in str(caught.value)


def test_a_read_only_server_is_retried_until_it_takes_writes(
    own_redis: RestartableRedis, run_id: str, tmp_path: Path
) -> None:
    # As a managed endpoint behaves in a failover: the name still leads to the demoted primary
    # for a while, then to one that takes writes.
    conn = client(own_redis, outage_s=60)
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([TaskSpec(id="t1", member_id="m1", task="x")])
    admin = client(own_redis)
    with RestartableRedis(tmp_path / "nobody") as nobody:
        nobody_port = nobody.port
    admin.replicaof("127.0.0.1", nobody_port)
    claimed: list[str | None] = []
    claimer = threading.Thread(target=lambda: claimed.append(board.claim("t1", "m1", "w:1", 30)))
    claimer.start()
    wait_until(
        lambda: (
            int(admin.info("errorstats").get("errorstat_READONLY", {}).get("count", 0))
            + int(admin.info("errorstats").get("errorstat_ERR", {}).get("count", 0))
            >= 1
        ),
        30,
        message="the claim to be refused once",
    )
    admin.replicaof("no", "one")
    claimer.join(30)
    assert claimed and claimed[0] is not None and not claimer.is_alive()


def test_out_of_memory_is_one_line_and_not_retried(
    own_redis: RestartableRedis, run_id: str
) -> None:
    conn = client(own_redis, outage_s=60)
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([TaskSpec(id="t1", member_id="m1", task="x")])
    conn.config_set("maxmemory-policy", "noeviction")
    conn.config_set("maxmemory", 1)
    started = time.monotonic()
    for write in (lambda: conn.set("k", "v"), lambda: board.claim("t1", "m1", "w:1", 30)):
        with (
            pytest.raises(InfraError, match="Redis is out of memory.*Raise maxmemory"),
            redis_errors_as_infra(),
        ):
            write()
    assert time.monotonic() - started < 5, "a refusal waiting cannot fix was retried"


def test_a_failing_snapshot_refuses_writes_with_one_line(
    own_redis: RestartableRedis, tmp_path: Path, run_id: str
) -> None:
    # The data dir vanishes under the server (it runs as root here, so permissions would not
    # stop it): its next BGSAVE fails, and with a save point set it refuses writes (MISCONF).
    conn = client(own_redis)
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([TaskSpec(id="t1", member_id="m1", task="x")])
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    conn.config_set("dir", str(doomed))
    conn.config_set("appendonly", "no")
    conn.config_set("save", "3600 1")
    conn.config_set("stop-writes-on-bgsave-error", "yes")
    doomed.rmdir()
    conn.bgsave()
    wait_until(
        lambda: conn.info("persistence").get("rdb_last_bgsave_status") == "err",
        30,
        message="the snapshot to fail",
    )
    for write in (lambda: conn.set("k", "v"), lambda: board.claim("t1", "m1", "w:1", 30)):
        with (
            pytest.raises(InfraError, match="cannot save its RDB snapshot.*Fix its data dir"),
            redis_errors_as_infra(),
        ):
            write()
    conn.config_set("save", "")  # else its shutdown would try to save there, and refuse to stop
    conn.config_set("dir", str(tmp_path))


def test_connect_warns_once_when_maxmemory_policy_can_evict_teamctls_keys(
    own_redis: RestartableRedis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "_eviction_warned", False)
    conn = client(own_redis)
    conn.config_set("maxmemory", 100 * 1024 * 1024)
    with caplog.at_level(logging.WARNING, logger=connection.__name__):
        connect(own_redis.url)  # noeviction: nothing to say
        assert caplog.messages == []
        conn.config_set("maxmemory-policy", "volatile-lru")
        connect(own_redis.url)
        connect(own_redis.url)
    assert len(caplog.messages) == 1
    assert "maxmemory-policy is volatile-lru" in caplog.messages[0]
    assert "Set maxmemory-policy noeviction" in caplog.messages[0]


def test_a_run_outlives_its_primary_through_sentinel_with_every_task_once(
    llm: ScriptedLLM, tmp_path: Path, run_id: str
) -> None:
    with SentinelGroup(tmp_path / "redis") as group:
        conn = connect(group.url)
        workers = LocalWorkers(group.url, ["members"], 2, tmp_path / "worker-logs")
        workers.start()
        try:
            wait_until(
                lambda: len(conn.smembers("rq:workers")) >= 2,
                60,
                message="2 rq workers through the sentinels",
            )
            models = {
                "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
                # The members' calls outlast the failover (~2-3 s on loopback).
                "member": llm.script(
                    f"member-{run_id}", handler=member_answer, latency_s=scaled(6, floor_s=4)
                ),
                "synth": llm.script(f"synth-{run_id}", ["the answer"]),
            }
            # The failover (~1 s to call the primary down, then an election) must fit in the
            # outage window, and the claims and the coordinator's lease must outlive it.
            team = team_file(
                tmp_path / "team.toml",
                models,
                options=timing_options(redis_outage_s=30, heartbeat_ttl_s=15, lease_ttl_s=15),
            )
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
                    group.url,
                    "--workers",
                    "0",
                    "--run-id",
                    run_id,
                    "--json",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            wait_until(
                lambda: len(llm.requests[f"member-{run_id}"]) == 2,
                90,
                message="both members waiting on their model calls",
            )
            before = conn.hgetall(RunKeys(run_id).task("a"))["token"]
            group.kill_primary()
            group.wait_promoted()
            try:
                out, err = coordinator.communicate(timeout=EXIT_DEADLINE_S)
            finally:
                stop_process(coordinator)  # type: ignore[arg-type]
        finally:
            workers.stop()
        assert coordinator.returncode == 0, err
        result = json.loads(out)
        assert result["status"] == "completed" and result["output"] == "the answer"
        assert [(s["task_id"], s["status"], s["attempts"]) for s in result["task_states"]] == [
            ("a", "completed", 1),
            ("b", "completed", 1),
        ]
        events = conn.xrange(RunKeys(run_id).events)
        claims = [e["token"] for _, e in events if e.get("status") == "in_progress"]
        assert len(claims) == len(set(claims)) == 2
        assert before in claims
