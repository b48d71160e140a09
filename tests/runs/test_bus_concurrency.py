"""Exactly-once delivery under real concurrency: sender and reader processes on one run's bus."""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing.synchronize import Event
from pathlib import Path

import redis
from teamctl.shared.bus import MessageBus, delivered_to

from tests.support.runs import roster_bus

SENDERS = ["s1", "s2", "s3", "s4"]
RECEIVERS = ["r1", "r2", "r3"]
READERS_PER_RECEIVER = 2
MESSAGES_PER_SENDER = 500
JOIN_TIMEOUT_S = 60


def stream_order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def _bus(redis_url: str, run_id: str) -> MessageBus:
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    return roster_bus(conn, run_id, SENDERS + RECEIVERS)


def send_all(redis_url: str, run_id: str, sender: str, start: Event) -> None:
    """Every fourth message is a broadcast; the rest go round the receivers."""
    bus = _bus(redis_url, run_id)
    start.wait()
    for n in range(MESSAGES_PER_SENDER):
        content = f"{sender}:{n}"
        if n % 4 == 3:
            bus.broadcast(sender, None, None, content)
        else:
            bus.send(sender, RECEIVERS[n % 3], None, None, content)


def read_until_stopped(
    redis_url: str, run_id: str, member: str, out: str, ready: Event, stop: Event
) -> None:
    """Read repeatedly while the senders run, then once more; record every message received."""
    bus = _bus(redis_url, run_id)
    received: list[list[str]] = []
    ready.set()
    while not stop.is_set():
        received += [[m.id, m.content] for m in bus.read_unread(member)]
    received += [[m.id, m.content] for m in bus.read_unread(member)]
    Path(out).write_text(json.dumps(received))


def test_each_member_gets_each_message_exactly_once_in_order(
    redis_url: str, run_id: str, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("fork")
    start, stop = ctx.Event(), ctx.Event()
    readers, outputs = [], {}
    for member in RECEIVERS:
        for k in range(READERS_PER_RECEIVER):
            out, ready = str(tmp_path / f"{member}-{k}.json"), ctx.Event()
            outputs.setdefault(member, []).append(out)
            reader = ctx.Process(
                target=read_until_stopped, args=(redis_url, run_id, member, out, ready, stop)
            )
            reader.start()
            readers.append((reader, ready))
    senders = [ctx.Process(target=send_all, args=(redis_url, run_id, s, start)) for s in SENDERS]
    try:
        for sender in senders:
            sender.start()
        for _, ready in readers:
            assert ready.wait(JOIN_TIMEOUT_S), "a reader did not start"
        start.set()
        for sender in senders:
            sender.join(JOIN_TIMEOUT_S)
            assert sender.exitcode == 0
        stop.set()
        for reader, _ in readers:
            reader.join(JOIN_TIMEOUT_S)
            assert reader.exitcode == 0
    finally:
        for process in senders + [r for r, _ in readers]:
            if process.is_alive():
                process.terminate()
                process.join(5)

    published = _bus(redis_url, run_id).messages()
    assert len(published) == len(SENDERS) * MESSAGES_PER_SENDER
    for member in RECEIVERS:
        expected = [m.id for m in published if delivered_to(m, member)]
        assert len(expected) == 1000  # 500 direct (a third of 1500) + all 500 broadcasts
        per_reader = [json.loads(Path(out).read_text()) for out in outputs[member]]
        for got in per_reader:
            ids = [entry_id for entry_id, _ in got]
            assert ids == sorted(ids, key=stream_order), f"{member}: a reader saw disorder"
        together = sorted((e for got in per_reader for e in got), key=lambda e: stream_order(e[0]))
        assert [entry_id for entry_id, _ in together] == expected, f"{member}: lost or repeated"
        for sender in SENDERS:
            numbers = [int(c.split(":")[1]) for _, c in together if c.startswith(sender + ":")]
            assert numbers == sorted(numbers) and len(numbers) == 250
