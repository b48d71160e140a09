"""Fault injection for tests: a TCP proxy that can cut, blackhole or slow a link, and a
redis-server that can be restarted on the same port and data directory (appendonly on).

Both run on loopback (or an address the test passes) and are stopped by pid or by closing their
sockets; nothing here touches a process it did not start."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
from teamctl.shared.redis.embedded import free_port, redis_server_binary

STARTUP_TIMEOUT_S = 15.0
CHUNK_BYTES = 65536


class TcpProxy:
    """Forwards `listen_host:port` to `target`; `cut()`, `blackhole()`, `latency(ms)` and
    `restore()` change what happens to the link, for every connection at once.

    Either side may be a unix socket instead (`listen_path`, or a target host of the form
    "unix:PATH"), which lets a process in another network namespace reach a loopback server."""

    def __init__(
        self,
        target_host: str,
        target_port: int = 0,
        listen_host: str = "127.0.0.1",
        *,
        listen_port: int = 0,
        listen_path: str | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.listen_path = listen_path
        self.port = listen_port
        self._mode = "open"
        self._latency_s = 0.0
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._restored = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="tcp-proxy"
        )

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def url(self, db: int = 0) -> str:
        return f"redis://{self.listen_host}:{self.port}/{db}"

    def cut(self) -> None:
        """Close every connection and refuse new ones (a link that is down)."""
        self._call(self._set_mode("cut"))

    def blackhole(self) -> None:
        """Accept connections but never pass a byte either way (a host that stopped answering)."""
        self._call(self._set_mode("blackhole"))

    def latency(self, ms: float) -> None:
        """Delay every chunk by `ms` in each direction."""
        self._latency_s = ms / 1000

    def restore(self) -> None:
        self._call(self._set_mode("open"))

    def stop(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        if self.listen_path:
            self._server = await asyncio.start_unix_server(self._accept, self.listen_path)
        else:
            self._server = await asyncio.start_server(self._accept, self.listen_host, self.port)
            self.port = self._server.sockets[0].getsockname()[1]
        self._restored.set()

    async def _connect_target(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.target
        if host.startswith("unix:"):
            return await asyncio.open_unix_connection(host.removeprefix("unix:"))
        return await asyncio.open_connection(host, port)

    async def _set_mode(self, mode: str) -> None:
        self._mode = mode
        if mode == "open":
            self._restored.set()
            return
        self._restored.clear()
        if mode == "cut":
            for writer in list(self._writers):
                writer.transport.abort()  # a reset, as when a link or host goes away

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        # End every connection's task before the loop stops, not leave them pending.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode == "cut":
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await self._connect_target()
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(CHUNK_BYTES):
                await self._restored.wait()  # a blackholed link holds every byte
                if self._latency_s:
                    await asyncio.sleep(self._latency_s)
                if writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


class RestartableRedis:
    """A private redis-server with appendonly on, which can go down and come back on the same
    port and data directory, as in a restart or failover."""

    def __init__(
        self, data_dir: Path, bind: str = "127.0.0.1", *, args: tuple[str, ...] = ()
    ) -> None:
        self.data_dir = data_dir
        self.bind = bind
        self.port = free_port()
        self.args = args
        """More redis-server options (e.g. --replicaof HOST PORT)."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.bind}:{self.port}/0"

    def start(self) -> RestartableRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(self.port),
                "--bind",
                self.bind,
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)  # the server is starting; there is nothing to wait on yet
        return self

    def stop(self, *, crash: bool = False) -> None:
        """Stop by pid and wait until it is gone: SIGTERM, a SHUTDOWN that flushes the AOF, or
        with `crash` SIGKILL (every write already fsynced: appendfsync always)."""
        if self.process is not None and self.process.poll() is None:
            if crash:
                self.process.kill()
            else:
                self.process.terminate()
            self.process.wait(timeout=STARTUP_TIMEOUT_S)

    def restart(self, down_s: float, *, crash: bool = False) -> None:
        """Stop (or crash), stay down `down_s` (the outage being simulated), start again on the
        same port and data directory."""
        self.stop(crash=crash)
        time.sleep(down_s)
        self.start()

    def __enter__(self) -> RestartableRedis:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _answers(self) -> bool:
        try:
            return bool(
                redis.Redis(
                    host=self.bind, port=self.port, socket_timeout=1, socket_connect_timeout=1
                ).ping()
            )
        except redis.RedisError:
            return False


def serve_forwarder(listen_port: int, target_path: str) -> None:
    """Forward 127.0.0.1:listen_port to a unix socket until killed (run in a test namespace)."""
    proxy = TcpProxy("unix:" + target_path, listen_port=listen_port).start()
    print(f"forwarding {proxy.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    serve_forwarder(int(sys.argv[1]), sys.argv[2])
