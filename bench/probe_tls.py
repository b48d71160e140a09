"""Where a forked job's TLS time goes: one model call in processes forked from a warmed-up parent,
as RQ's forking worker runs jobs, over HTTP and over HTTPS; over HTTPS again with the SSL context
built in the job (as if the parent had not built it); and the TLS handshake alone.

Run: .venv/bin/python -m bench.probe_tls [--parent-calls https|http|warm-up]
The scripted servers run in a child process, so the parent holds no server thread, as a worker.
--parent-calls makes the parent, after the warm-up, make two more calls before it forks: to the
HTTPS server (what a TLS warm-up would move out of the jobs), to the HTTP one, or the warm-up's
own loopback call. Prints medians of wall ms and minor page faults per forked call, CALLS each.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import certifi

CALLS = 50
TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}
SERVE = """
import sys
from tests.support.llm import ScriptedLLM
servers = [ScriptedLLM(), ScriptedLLM(tls=True)]
for server in servers:
    server.start()
    server.script("probe", ["done"], repeat_last=True)
print(servers[0].api_base, servers[1].api_base, servers[1].ca_file, flush=True)
sys.stdin.read()  # until the probe closes its end
for server in servers:
    server.stop()
"""
Probe = Callable[[], object]


def forked(probe: Probe) -> tuple[float, int]:
    """Wall ms and minor page faults of `probe` in a process forked from this one."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        probe()
        elapsed_ms = (time.perf_counter() - started) * 1000
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        os.write(write_end, f"{elapsed_ms} {faults}".encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as result:
        elapsed_text, faults_text = result.read().split()
    os.waitpid(pid, 0)
    return float(elapsed_text), int(faults_text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent-calls", choices=["https", "http", "warm-up"])
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE],
        cwd=root,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        http_base, https_base, ca_file = server.stdout.readline().split()
        bundle = Path(ca_file).with_name("probe-bundle.pem")  # certifi's size, as a provider's
        bundle.write_text(Path(certifi.where()).read_text() + Path(ca_file).read_text())
        os.environ["SSL_CERT_FILE"] = str(bundle)  # before the warm-up, as in a worker
        report(http_base, https_base, args.parent_calls)
    finally:
        server.communicate("")
    return 0


def report(http_base: str, https_base: str, parent_calls: str | None) -> None:
    """Warm up as teamctl.worker.settings does, then time each probe in forked processes."""
    from teamctl.shared.agent.litellm_warmup import _InlineExecutor, _warm_success_path, warm_up
    from teamctl.shared.agent.llm import LitellmClient, load_litellm

    litellm = load_litellm()  # first: it keeps litellm from fetching its cost map at import
    from litellm.llms.custom_httpx import http_handler

    warm_up(litellm)

    def call(base: str) -> Probe:
        return lambda: LitellmClient(provider_keys=(), max_retries=0).complete(
            "openai/probe", [{"role": "user", "content": "probe"}], tools=[TOOL], api_base=base
        )

    def context_built_in_job() -> None:
        http_handler._ssl_context_cache.clear()
        call(https_base)()

    def handshake() -> None:
        address = urlsplit(https_base)
        context = http_handler.get_ssl_configuration()
        assert isinstance(context, ssl.SSLContext), "litellm verifies with a context of its own"
        with (
            socket.create_connection((address.hostname, address.port)) as raw,
            context.wrap_socket(raw, server_hostname=address.hostname),
        ):
            pass

    if parent_calls == "warm-up":
        _warm_success_path(litellm)
        _warm_success_path(litellm)
    elif parent_calls:  # logging inline, as in the warm-up: no executor thread left to fork
        executor, litellm.utils.executor = litellm.utils.executor, _InlineExecutor()
        base = https_base if parent_calls == "https" else http_base
        call(base)()
        call(base)()
        litellm.utils.executor = executor
        litellm.in_memory_llm_clients_cache.flush_cache()  # no live connection across fork
    import gc

    gc.freeze()
    probes = {
        "HTTP call": call(http_base),
        "HTTPS call": call(https_base),
        "HTTPS call, context built in the job": context_built_in_job,
        "TLS handshake alone": handshake,
    }
    times: dict[str, list[tuple[float, int]]] = {name: [] for name in probes}
    for _ in range(CALLS):  # interleaved, so drift on a shared machine hits each alike
        for name, probe in probes.items():
            times[name].append(forked(probe))
    made = f" that made 2 more {parent_calls} calls" if parent_calls else ""
    print(f"forked from a warmed-up parent{made}, median of {CALLS}:")
    for name, samples in times.items():
        print(
            f"  {name:38} {statistics.median(s[0] for s in samples):6.1f} ms "
            f"{statistics.median(s[1] for s in samples):6.0f} minor faults"
        )


if __name__ == "__main__":
    sys.exit(main())
