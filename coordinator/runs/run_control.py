"""Steering a live run from outside it: a person's message to its members, the decision on a plan
waiting for approval, a raised budget, and a cancel that ends the run here when no coordinator
drives it. The CLI's `send`, `approve`, `reject`, `budget` and `cancel`, the dashboard's controls
and the Python API share these."""

from __future__ import annotations

import math

from teamctl.shared.budget import BudgetState
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import Envelope, SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_records import RunStatus, Wake


def live_run(run: RunHandle) -> RunHandle:
    """The run (its spec read), refusing runs that have already finished."""
    state = run.store.state()
    if state.finished:
        raise ConfigError(f"run {run.run_id} has already finished ({state.status})")
    return run


def send_message(run: RunHandle, to: str, text: str) -> Envelope | None:
    """Send `text` as `lead` to member `to` (or `*`) of a live run; the message. ConfigError
    for a finished run, a run without a bus, an empty or oversized text, an unknown member."""
    run_id = run.run_id
    state = run.store.state()
    if state.finished:
        raise ConfigError(
            f"run {run_id} has already finished ({state.status}): no member will "
            f"read a message now; `teamctl status {run_id}` shows its result"
        )
    if not run.spec.options.enable_message_bus:
        raise ConfigError(
            f"run {run_id} has its message bus off (enable_message_bus = false): "
            "its members cannot receive messages"
        )
    if not text.strip():
        raise ConfigError("the message is empty: pass the text to send")
    # The bus checks the recipient against the run's roster and the size against
    # max_message_bytes, each a one-line ConfigError naming the members or the limit.
    return run.bus.send(LEAD, to, None, None, text)


def record_plan_decision(run: RunHandle, approved: bool, reason: str | None) -> None:
    """Record the decision on the plan the run waits on, once. ConfigError for a finished run,
    one that does not ask for approval, one with no plan yet, or a plan already decided."""
    run = live_run(run)
    store, run_id = run.store, run.run_id
    if not run.spec.options.require_plan_approval:
        raise ConfigError(
            f"run {run_id} does not ask for plan approval (require_plan_approval is off)"
        )
    if store.state().status is RunStatus.PLANNING:  # nobody may approve a plan nobody has seen
        raise ConfigError(
            f"run {run_id} has no plan yet; approve once `teamctl status {run_id}` "
            "says awaiting_approval"
        )
    if not store.record_approval(approved, reason):
        raise ConfigError(f"the plan of run {run_id} was already {store.state().approval}")


def cancel_run(run: RunHandle) -> bool:
    """Ask the run to stop; True when no coordinator drove it and it was ended here, False
    when its coordinator is stopping it. ConfigError for a run that already finished."""
    run = live_run(run)
    store, lease = run.store, run.lease
    store.request_stop("cancelled")
    # Blocked now, before a member in flight fails its task: what never ran says "cancelled",
    # not "dependency failed", whoever ends the run and whatever ends first.
    run.board.block_stalled("cancelled")
    if not lease.try_acquire():
        return False
    try:
        status = store.state().status
        if status is RunStatus.CANCELLED:  # its coordinator obeyed, then let the lease go
            return False
        if status.finished:  # its coordinator finished it just before we took the lease
            raise ConfigError(f"run {run.run_id} has already finished ({status})")
        _end_cancelled(run)
    finally:
        lease.release()
    return True


def _end_cancelled(run: RunHandle) -> None:
    """No coordinator is left to wait out a grace period: revoke every claim now (a late write
    is refused and counted), block what never ran, and end the run under our lease."""
    from teamctl.shared.runs.retention import expire_run
    from teamctl.shared.runs.store import RunEnd

    board, store, spec = run.board, run.store, run.spec
    announce = spec.options.enable_message_bus
    board.reclaim_expired(spec.options.max_attempts, announce_failures=announce)
    board.block_stalled("cancelled")  # first: the failures below must not block them otherwise
    board.fail_in_progress("cancelled", announce_failures=announce)
    store.finish(
        RunEnd(
            RunStatus.CANCELLED,
            spec.options.retention_s,
            error="cancelled",
            announce=SystemType.RUN_CANCELLED if announce else None,
            announce_text="cancelled",
        )
    )
    expire_run(store.conn, spec.run_id, spec.options.retention_s)


def parse_top_up(add_tokens: str | None, add_usd: str | None) -> tuple[int, float]:
    """`--add-tokens` and `--add-usd` as numbers: positive, finite, tokens whole; ConfigError
    (one line) otherwise."""
    tokens, usd = 0, 0.0
    if add_tokens is not None:
        try:
            tokens = int(add_tokens)
        except ValueError:
            tokens = 0
        if tokens <= 0:
            raise ConfigError(f"--add-tokens {add_tokens!r}: give a whole number above 0")
    if add_usd is not None:
        try:
            usd = float(add_usd)
        except ValueError:
            usd = 0.0
        if not math.isfinite(usd) or usd <= 0:
            raise ConfigError(f"--add-usd {add_usd!r}: give an amount in dollars above 0")
    return tokens, usd


def raise_budget(run: RunHandle, tokens: int, usd: float) -> BudgetState:
    """Add to a live run's budget and wake its coordinator (a paused run resumes); the budget
    after. ConfigError for a finished run, or a limit the run does not have."""
    run = live_run(run)
    options = run.spec.options
    if tokens and options.max_tokens is None:
        raise ConfigError(
            f"run {run.run_id} has no max_tokens: its tokens are not limited, so "
            "there is nothing to add to (--add-usd raises max_cost_usd)"
        )
    if usd and options.max_cost_usd is None:
        raise ConfigError(
            f"run {run.run_id} has no max_cost_usd: its cost is not limited, so "
            "there is nothing to add to (--add-tokens raises max_tokens)"
        )
    state = run.budget.top_up(tokens, usd)
    run.store.wake(Wake.BUDGET)
    return state


def resume_hint(run: RunHandle) -> str:
    """The commands that resume a run paused on its budget, or end it (for `run`, `status`):
    the flag is one of the limits it has, with enough for the next call, so the command works
    pasted."""
    flag = run.budget.top_up_flag()
    return f"`teamctl budget {run.run_id} {flag}` resumes it, `teamctl cancel {run.run_id}` ends it"
