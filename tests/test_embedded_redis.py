"""The embedded redis-server: started once, reused, stopped by pid, clear errors."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from coordinator.cli import main
from shared.connection import connect
from shared.embedded_redis import EmbeddedRedis, free_port
from shared.errors import InfraError


def test_start_reuse_and_stop(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.ensure()
    try:
        redis.Redis.from_url(url).set("k", "v")
        assert EmbeddedRedis(tmp_path / "redis").ensure() == url  # a later command reuses it
        assert (tmp_path / "redis" / "appendonly.aof").exists() or any(
            (tmp_path / "redis").glob("appendonly*"))
    finally:
        assert server.stop() is True
    assert server.running_url() is None
    assert server.stop() is False


def test_busy_port_is_a_clear_error_not_a_hang(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(InfraError, match=f"port {port} on 127.0.0.1 is in use"):
            EmbeddedRedis(tmp_path / "redis").start(port=port)
        assert time.monotonic() - started < 5


def test_cli_prints_url_and_stops(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["redis", "url"])
    try:
        assert first.exit_code == 0, first.output
        url = first.stdout.strip()
        assert url.startswith("redis://127.0.0.1:")
        assert runner.invoke(main, ["redis", "url"]).stdout.strip() == url
    finally:
        stopped = runner.invoke(main, ["redis", "stop"])
    assert stopped.stdout.strip() == "stopped"


def test_unreachable_redis_is_a_one_line_error() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(InfraError, match="cannot reach Redis at"):
        connect(url)
    result = CliRunner().invoke(main, ["status", "some-run", "--redis-url", url])
    assert result.exit_code == 1
    assert result.stderr.startswith("teamctl: cannot reach Redis at")
    assert "Traceback" not in result.output
