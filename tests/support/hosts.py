"""Two hosts on one machine for tests: network namespaces joined by a veth pair, and ways to
run and stop processes in them."""

from __future__ import annotations

import contextlib
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
from teamctl.coordinator.local_workers.processes import stop_process
from teamctl.shared.redis.embedded import redis_server_binary

from tests.support.faults import TcpProxy
from tests.support.llm import ScriptedLLM
from tests.support.waiting import wait_until

REDIS_PORT = 6379
SUBNET = "10.254.{n}.{host}/30"
"""A /30 that exists only between the test's two namespaces."""


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
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, *command],  # type: ignore[call-overload]
            start_new_session=True,
            **kwargs,
        )


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


def network_namespaces() -> Iterator[TwoHosts]:
    """Two fresh namespaces joined by a veth pair (a pytest fixture: see conftest); skipped
    without root and `ip`, failed when root cannot create them."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2's `ip` to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    a, b, link_a, link_b = f"tc-a-{tag}", f"tc-b-{tag}", f"tca{tag}", f"tcb{tag}"
    n = int(tag[:2], 16)
    try:
        ip("netns", "add", a)
    except subprocess.CalledProcessError as exc:
        # Root with `ip` (as in CI) must be able to run this test: a skip would hide it.
        pytest.fail(
            f"cannot create a network namespace as root with `ip`: {exc.stderr.decode().strip()}"
        )
    try:
        ip("netns", "add", b)
        ip("link", "add", link_a, "netns", a, "type", "veth", "peer", "name", link_b, "netns", b)
        for ns, link, host in ((a, link_a, 1), (b, link_b, 2)):
            ip("-n", ns, "addr", "add", SUBNET.format(n=n, host=host), "dev", link)
            ip("-n", ns, "link", "set", link, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield TwoHosts(a=a, b=b, a_addr=SUBNET.format(n=n, host=1).split("/")[0], link_b=link_b)
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def answers(conn: redis.Redis) -> bool:
    try:
        return bool(conn.ping())
    except redis.RedisError:
        return False


@dataclass
class RedisHost:
    """Redis in namespace `a`, on the veth address for the other host (`remote_url`) and on a
    unix socket for this machine's processes (`local_url`: unix sockets are not bound to a
    network namespace), which also reach it on their loopback (`loopback_url`, a forwarder to
    the socket: the Redis host's processes that name 127.0.0.1); the scripted model reachable
    from namespace `b` through a forwarder on its loopback. `processes` are stopped, last first,
    when the context ends."""

    local_url: str
    remote_url: str
    loopback_url: str
    conn: redis.Redis
    processes: list[subprocess.Popen[bytes]]


@contextlib.contextmanager
def redis_host(hosts: TwoHosts, llm: ScriptedLLM) -> Iterator[RedisHost]:
    """Start Redis in namespace `a` and the model forwarder in `b`; stop everything after."""
    sock_dir = Path("/tmp") / f"tc-{uuid.uuid4().hex[:8]}"  # unix socket paths must be short
    sock_dir.mkdir(mode=0o700)
    redis_sock, llm_sock = sock_dir / "redis.sock", str(sock_dir / "llm.sock")
    llm_port = int(llm.api_base.rsplit(":", 1)[1].split("/")[0])
    processes: list[subprocess.Popen[bytes]] = []
    llm_bridge = TcpProxy("127.0.0.1", llm_port, listen_path=llm_sock).start()
    loopback = TcpProxy(f"unix:{redis_sock}")
    try:
        processes.append(
            hosts.exec(
                hosts.a,
                [
                    redis_server_binary(),
                    "--bind",
                    hosts.a_addr,
                    "--port",
                    str(REDIS_PORT),
                    "--unixsocket",
                    str(redis_sock),
                    "--unixsocketperm",
                    "700",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        local_url = f"unix://{redis_sock}?db=0"
        conn = redis.Redis.from_url(local_url, decode_responses=True)
        wait_until(lambda: redis_sock.exists() and answers(conn), 30, message="Redis in ns a")
        loopback.start()
        processes.append(
            hosts.exec(
                hosts.b,
                [sys.executable, "-m", "tests.support.faults", str(llm_port), llm_sock],
                cwd=str(Path(__file__).parent.parent.parent),
                stdout=subprocess.DEVNULL,
            )
        )
        yield RedisHost(
            local_url, f"redis://{hosts.a_addr}:{REDIS_PORT}/0", loopback.url(), conn, processes
        )
    finally:
        for process in reversed(processes):
            stop_session(process)
        if loopback.port:
            loopback.stop()
        llm_bridge.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
