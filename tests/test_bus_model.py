"""Property test: random traffic, reads and trims on the Redis bus agree with a small Python model
of who was sent what, who has read what, and which messages a trim may drop."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.bus import TRIM_SLACK_DIVISOR, MessageBus

MEMBERS = ["m1", "m2", "m3"]
members = st.sampled_from(MEMBERS)
ops = st.lists(st.one_of(
    st.tuples(st.just("send"), members, members),
    st.tuples(st.just("broadcast"), members),
    st.tuples(st.just("publish"), st.sampled_from([None, "lead", *MEMBERS])),
    st.tuples(st.just("read"), members),
    st.tuples(st.just("history"), members, st.integers(0, 4)),
    st.tuples(st.just("trim")),
), max_size=60)


@dataclass
class Model:
    """Every message ever sent (by position), each member's deliveries and read count, and the
    position of the first message still on the bus."""

    cap: int
    sent: list[str] = field(default_factory=list)
    delivered: dict[str, list[int]] = field(default_factory=lambda: {m: [] for m in MEMBERS})
    read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMBERS, 0))
    first_kept: int = 0

    def add(self, sender: str, recipients: list[str]) -> None:
        for member in recipients:
            if member != sender:
                self.delivered[member].append(len(self.sent))
        self.sent.append(f"n{len(self.sent)}")
        if len(self.sent) - self.first_kept > self.cap + self.cap // TRIM_SLACK_DIVISOR:
            self.trim()

    def unread(self, member: str) -> list[int]:
        return self.delivered[member][self.read[member]:]

    def trim(self) -> None:
        oldest_unread = min((u[0] for u in map(self.unread, MEMBERS) if u), default=len(self.sent))
        self.first_kept = max(self.first_kept, min(len(self.sent) - self.cap, oldest_unread))


def apply(bus: MessageBus, model: Model, op: tuple) -> None:
    """Run one operation on the bus and the model, checking what the bus returns."""
    match op:
        case ("send", sender, to) if sender != to:
            bus.send(sender, to, None, None, f"n{len(model.sent)}")
            model.add(sender, [to])
        case ("broadcast", sender):
            bus.broadcast(sender, None, None, f"n{len(model.sent)}")
            model.add(sender, MEMBERS)
        case ("publish", to):
            bus.publish("system", to, "note", None, f"n{len(model.sent)}")
            model.add("system", MEMBERS if to is None else [to] if to in MEMBERS else [])
        case ("read", member):
            got = [m.content for m in bus.read_unread(member)]
            assert got == [model.sent[i] for i in model.unread(member)]
            model.read[member] = len(model.delivered[member])
        case ("history", member, limit):
            kept = [model.sent[i] for i in model.delivered[member] if i >= model.first_kept]
            got = [m.content for m in bus.history_for(member, limit)]
            assert got == (kept[-limit:] if limit else kept)
        case ("trim",):
            bus.trim()
            model.trim()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(1, 6), operations=ops)
def test_bus_agrees_with_the_model(conn: redis.Redis, cap: int, operations: list[tuple]) -> None:
    bus = MessageBus(conn, f"model-{uuid.uuid4().hex[:8]}", MEMBERS, bus_maxlen=cap)
    model = Model(cap)
    for op in operations:
        apply(bus, model, op)
        assert [m.content for m in bus.messages()] == model.sent[model.first_kept:]
        for member in MEMBERS:
            # Nothing a member has not read has left the bus.
            assert all(i >= model.first_kept for i in model.unread(member))
