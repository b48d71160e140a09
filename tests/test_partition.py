"""A worker on another host, then cut off: two network namespaces joined by a veth pair stand
for the Redis host and a second host. Its task is reclaimed and finished on the Redis host, and
its late write is refused and counted when the link returns; nothing is lost or doubled.

Redis lives in namespace A (the Redis host), listening on the veth address for the other host
and on a unix socket for this test, the coordinator and the Redis host's worker (unix sockets are
not bound to a network namespace). The worker in namespace B reaches the scripted model server
through a forwarder on B's loopback and a unix socket."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process, worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import redis_server_binary
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL
from tests.support.faults import TcpProxy
from tests.support.llm import ScriptedLLM, Slow
from tests.support.runs import next_token
from tests.support.waiting import wait_until

SUBNET = "10.254.{n}.{host}/30"
"""A /30 that exists only between the test's two namespaces."""
REDIS_PORT = 6379
HEARTBEAT_TTL_S = 4.0


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class TwoHosts:
    """Namespace `a` (the Redis host) and `b` (another host), and their veth addresses."""

    a: str
    b: str
    a_addr: str
    link_b: str

    def cut(self) -> None:
        ip("-n", self.b, "link", "set", self.link_b, "down")

    def restore(self) -> None:
        ip("-n", self.b, "link", "set", self.link_b, "up")

    def exec(self, ns: str, command: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """Start `command` in namespace `ns` (`ip netns exec` execs it: the pid is its own), in
        a session of its own, so a worker's forked job can be found and stopped with it."""
        return subprocess.Popen(["ip", "netns", "exec", ns, *command],  # type: ignore[call-overload]
                                start_new_session=True, **kwargs)


def stop_session(process: subprocess.Popen[bytes]) -> None:
    """Stop a process we started in a session of its own, and whatever is left in that session
    (an RQ job runs in a forked child in a process group of its own)."""
    stop_process(process)
    for pid in _session_pids(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _session_pids(session_id: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # Fields after the parenthesized command: state, ppid, pgrp, session, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) == session_id:
                pids.append(int(stat.parent.name))
    return pids


@pytest.fixture
def two_hosts() -> Iterator[TwoHosts]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2's `ip` to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    a, b, link_a, link_b = f"tc-a-{tag}", f"tc-b-{tag}", f"tca{tag}", f"tcb{tag}"
    n = int(tag[:2], 16)
    try:
        ip("netns", "add", a)
    except subprocess.CalledProcessError as exc:
        # Root with `ip` (as in CI) must be able to run this test: a skip would hide it.
        pytest.fail(f"cannot create a network namespace as root with `ip`: "
                    f"{exc.stderr.decode().strip()}")
    try:
        ip("netns", "add", b)
        ip("link", "add", link_a, "netns", a, "type", "veth", "peer", "name", link_b,
           "netns", b)
        for ns, link, host in ((a, link_a, 1), (b, link_b, 2)):
            ip("-n", ns, "addr", "add", SUBNET.format(n=n, host=host), "dev", link)
            ip("-n", ns, "link", "set", link, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield TwoHosts(a=a, b=b, a_addr=SUBNET.format(n=n, host=1).split("/")[0], link_b=link_b)
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def team_toml(path: Path, models: dict[str, str]) -> Path:
    path.write_text("\n".join([
        'team_id = "partition"', f'model = "{models["member"]}"',
        f'planner = {{ model = "{models["planner"]}", queue = "remote" }}',
        f'synthesizer = {{ model = "{models["synth"]}", queue = "remote" }}',
        "[[members]]", 'id = "m1"', 'queue = "remote"',
        "[options]", f"heartbeat_ttl_s = {HEARTBEAT_TTL_S}"]) + "\n")
    return path


def test_a_partitioned_worker_is_reclaimed_and_its_late_write_refused(
        two_hosts: TwoHosts, llm: ScriptedLLM, run_id: str, tmp_path: Path) -> None:
    sock_dir = Path("/tmp") / f"tc-{uuid.uuid4().hex[:8]}"  # unix socket paths must be short
    sock_dir.mkdir(mode=0o700)
    redis_sock, llm_sock = sock_dir / "redis.sock", str(sock_dir / "llm.sock")
    local_url = f"unix://{redis_sock}?db=0"
    remote_url = f"redis://{two_hosts.a_addr}:{REDIS_PORT}/0"
    llm_port = int(llm.api_base.rsplit(":", 1)[1].split("/")[0])
    plan = [{"id": "a", "memberId": "m1", "task": "A"}]
    models = {"planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
              # The cut-off worker's call outlasts the cut, the reclaim and the redo.
              "member": llm.script(f"member-{run_id}", [Slow("from the cut-off host", 45),
                                                        "from the Redis host"]),
              "synth": llm.script(f"synth-{run_id}", ["the answer"])}
    team = team_toml(tmp_path / "team.toml", models)
    processes: list[subprocess.Popen[bytes]] = []
    """Started in a namespace, each leading its own process group."""
    coordinators: list[subprocess.Popen[bytes]] = []
    local = LocalWorkers(local_url, ["remote"], 1, tmp_path / "local-logs")
    llm_bridge = TcpProxy("127.0.0.1", llm_port, listen_path=llm_sock).start()
    try:
        processes.append(two_hosts.exec(two_hosts.a, [
            redis_server_binary(), "--bind", two_hosts.a_addr, "--port", str(REDIS_PORT),
            "--unixsocket", str(redis_sock), "--unixsocketperm", "700", "--save", "",
            "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        conn = redis.Redis.from_url(local_url, decode_responses=True)
        wait_until(lambda: redis_sock.exists() and _answers(conn), 30, message="Redis in ns a")
        processes.append(two_hosts.exec(two_hosts.b, [
            sys.executable, "-m", "tests.support.faults", str(llm_port), llm_sock],
            cwd=str(Path(__file__).parent.parent), stdout=subprocess.DEVNULL))
        with (tmp_path / "remote-worker.log").open("wb") as log:
            processes.append(two_hosts.exec(two_hosts.b, worker_command(remote_url, ["remote"]),
                                            stdout=log, stderr=subprocess.STDOUT))
        wait_until(lambda: len(conn.smembers("rq:workers")) == 1, 60, message="remote worker")
        with (tmp_path / "coordinator.log").open("wb") as log:
            coordinator = subprocess.Popen(
                [*TEAMCTL, "run", "Ship it", "--team", str(team), "--api-base", llm.api_base,
                 "--redis-url", local_url, "--workers", "0", "--run-id", run_id, "--json"],
                stdout=subprocess.PIPE, stderr=log)
        coordinators.append(coordinator)
        board = TaskBoard(conn, RunKeys(run_id))
        wait_until(lambda: (t := board.get("a")) and t.status is TaskStatus.IN_PROGRESS, 90,
                   message="the remote worker to claim a")
        remote_claim = board.get("a")
        wait_until(lambda: len(llm.requests[f"member-{run_id}"]) == 1, 60,
                   message="the remote member's model call")

        two_hosts.cut()
        local.start()  # the Redis host's worker: it takes the task once it is reclaimed

        out, _ = coordinator.communicate(timeout=180)
        assert coordinator.returncode == 0, (tmp_path / "coordinator.log").read_text()
        two_hosts.restore()
        wait_until(lambda: board.get("a").stale_writes >= 1, 90,
                   message="the cut-off worker's late write to be refused")

        result = json.loads(out)
        assert result["status"] == "completed" and result["output"] == "the answer"
        a = board.get("a")
        assert (a.status, a.output, a.attempts) == (
            TaskStatus.COMPLETED, "from the Redis host", 2)
        # The Redis host's worker took it with the run's next token.
        assert a.worker != remote_claim.worker and a.token == next_token(remote_claim.token)
        types = [m.type for m in MessageBus(conn, RunKeys(run_id)).messages()]
        assert types.count("task.result") == 1 and types.count("run.complete") == 1
    finally:
        local.stop()
        for coordinator in coordinators:
            stop_process(coordinator)
        for process in reversed(processes):
            stop_session(process)
        llm_bridge.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _answers(conn: redis.Redis) -> bool:
    try:
        return bool(conn.ping())
    except redis.RedisError:
        return False
