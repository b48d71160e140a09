"""litellm's Router against what shared provider limits need: its per-call cost beside a bare
litellm.completion, and whether two Routers in two processes on one Redis keep one rpm limit
(and what a call past it gets: a wait or an error).

Run: .venv/bin/python -m bench.bench_router [--calls N] [--rpm R]
Starts the scripted model server in this process and a throwaway redis-server (stopped by pid);
the two Router processes are children of this one, each making its calls as fast as it can.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from teamctl.shared.agent.llm import load_litellm
from teamctl.shared.redis.embedded import throwaway_redis

from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

MESSAGES = [{"role": "user", "content": "hello"}]
ROUNDS = 5
"""The per-call figures alternate direct and Router blocks this many times: drift cancels."""
GROUP = "shared"
"""The Router's model group name; its one deployment is the scripted server's model."""


def deployment(model: str, api_base: str, rpm: int | None) -> list[dict[str, Any]]:
    """A Router model_list of one deployment, with an rpm limit when given."""
    params: dict[str, Any] = {"model": model, "api_base": api_base, "api_key": "k"}
    if rpm is not None:
        params["rpm"] = rpm
    return [{"model_name": GROUP, "litellm_params": params}]


def per_call_ms(call: Any, calls: int) -> float:
    """The median wall time of `calls` calls of `call`, in ms."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def overhead(llm: ScriptedLLM, calls: int) -> list[BenchFigure]:
    """Router.completion beside litellm.completion on one answering server, in one process."""
    litellm = load_litellm()
    model = llm.script("router-overhead", ["ok"], repeat_last=True)
    router = litellm.Router(model_list=deployment(model, llm.api_base, None), num_retries=0)

    def direct() -> None:
        litellm.completion(
            model=model,
            messages=MESSAGES,
            api_base=llm.api_base,
            api_key="k",
            num_retries=0,
            max_retries=0,
        )

    def routed() -> None:
        router.completion(model=GROUP, messages=MESSAGES)

    direct()  # first-call costs out of the figures
    routed()
    bare, via = [], []
    for _ in range(ROUNDS):
        bare.append(per_call_ms(direct, calls // ROUNDS))
        via.append(per_call_ms(routed, calls // ROUNDS))
    return [
        BenchFigure(
            name="Router.completion per call",
            value=statistics.median(via),
            unit="ms",
            baseline=statistics.median(bare),
            baseline_name="litellm.completion",
            note=f"{calls} calls each",
        )
    ]


def child(redis_url: str, api_base: str, model: str, rpm: int, calls: int) -> None:
    """One Router process: `calls` calls, printing one JSON line of what each got."""
    litellm = load_litellm()
    router = litellm.Router(
        model_list=deployment(model, api_base, rpm),
        redis_url=redis_url,
        routing_strategy="usage-based-routing-v2",
        num_retries=0,
    )
    served, refused, refused_ms, errors = 0, 0, [], set()
    for _ in range(calls):
        start = time.perf_counter()
        try:
            router.completion(model=GROUP, messages=MESSAGES)
            served += 1
        except Exception as exc:  # past the limit: which error, how soon, is the finding
            refused += 1
            refused_ms.append((time.perf_counter() - start) * 1000)
            errors.add(type(exc).__name__)
    print(
        json.dumps(
            {
                "served": served,
                "refused": refused,
                "errors": sorted(errors),
                "refused_ms": statistics.median(refused_ms) if refused_ms else 0.0,
            }
        )
    )


def routers(
    url: str, llm: ScriptedLLM, model: str, rpm: int, calls: int, together: bool
) -> list[dict[str, Any]]:
    """What each of two Router processes got: started together, or the second after the first."""
    command = [
        sys.executable,
        "-m",
        "bench.bench_router",
        "--child",
        url,
        llm.api_base,
        model,
        str(rpm),
        str(calls),
    ]
    if not together:
        return [
            json.loads(
                subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
                .stdout.strip()
                .splitlines()[-1]
            )
            for _ in range(2)
        ]
    children = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ})
        for _ in range(2)
    ]
    return [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in children]


def shared_rpm(llm: ScriptedLLM, rpm: int, calls: int) -> list[BenchFigure]:
    """Two Router processes on one Redis, each making `calls` calls against one rpm limit:
    one after the other, then both at once."""
    after = llm.script("router-after", ["ok"], repeat_last=True)
    with throwaway_redis() as url:
        firsts = routers(url, llm, after, rpm, calls, together=False)
    rows = [
        BenchFigure(
            name="two Routers on one Redis, one after the other: requests served",
            value=len(llm.requests[after.split("/", 1)[1]]),
            unit="requests",
            baseline=rpm,
            baseline_name="the rpm limit",
            note=f"served {[o['served'] for o in firsts]}",
        )
    ]
    model = llm.script("router-shared", ["ok"], repeat_last=True)
    with throwaway_redis() as url:
        outs = routers(url, llm, model, rpm, calls, together=True)
    served_by_server = len(llm.requests[model.split("/", 1)[1]])
    refused = sum(o["refused"] for o in outs)
    return rows + [
        BenchFigure(
            name="two Routers on one Redis at once: requests the provider got",
            value=served_by_server,
            unit="requests",
            baseline=rpm,
            baseline_name="the rpm limit",
            goal="<= the limit",
            met=served_by_server <= rpm,
            note=f"{2 * calls} calls, served {[o['served'] for o in outs]}",
        ),
        BenchFigure(
            name="two Routers on one Redis at once: calls refused past the limit",
            value=refused,
            unit="calls",
            note=f"{sorted({e for o in outs for e in o['errors']})} at once, no wait "
            "for the next minute: median "
            f"{max(o['refused_ms'] for o in outs):.1f} ms",
        ),
    ]


FULL_CALLS, FULL_RPM = 300, 20
SMOKE_CALLS, SMOKE_RPM = 10, 4


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE_CALLS if smoke else FULL_CALLS, SMOKE_RPM if smoke else FULL_RPM)


def run(calls: int, rpm: int) -> list[BenchFigure]:
    """Both measurements against one scripted server, started here and stopped after."""
    llm = ScriptedLLM()
    llm.start()
    try:
        return overhead(llm, calls) + shared_rpm(llm, rpm, rpm)
    finally:
        llm.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=FULL_CALLS)
    parser.add_argument("--rpm", type=int, default=FULL_RPM)
    parser.add_argument("--child", nargs=5, metavar=("REDIS", "BASE", "MODEL", "RPM", "CALLS"))
    args = parser.parse_args()
    if args.child:
        url, base, model, rpm, calls = args.child
        child(url, base, model, int(rpm), int(calls))
        return 0
    return print_figures(run(args.calls, args.rpm))


if __name__ == "__main__":
    sys.exit(main())
