"""The Python API: a team you run from code as `teamctl run` runs it, and a handle on a run
(started here or elsewhere) to watch, steer, cancel and wait for it.

The run itself is the CLI's: the same checks, Redis records, workers and result object. A run
started here is driven by a coordinator on a thread of this process; the model calls happen on
the workers (the embedded defaults start a local pool, as the CLI does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from teamctl.coordinator.local_workers.pool import DEFAULT_IDLE_EXIT_S
from teamctl.coordinator.runs.approval import ApprovalMode
from teamctl.coordinator.runs.launch import WorkerPlan, launch, run_to_end
from teamctl.coordinator.runs.progress import Reporter
from teamctl.coordinator.runs.result import build_result
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.errors import ConfigError, RunFailed, TeamError
from teamctl.shared.redis.choice import is_embedded, resolve_redis_url
from teamctl.shared.redis.connection import connect, redis_errors_as_infra, set_outage
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions, refuse_removed_options
from teamctl.shared.runs.output import RunEvent, RunResult
from teamctl.shared.runs.run_config import ModelSource
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.settings import load_settings
from teamctl.shared.team_file import (
    DEFAULT_MEMBERS,
    Member,
    RoleModel,
    TeamFile,
    load_team_file,
    team_error,
)

log = logging.getLogger("teamctl")
STOP_WAIT_S = 10.0
"""How long Team.run waits for its coordinator thread to stop once interrupted (it checks its
lease at least every second)."""


class Team:
    """A team as a team file describes it (members, models, options, hooks)."""

    def __init__(
        self,
        members: Sequence[Member] | None = None,
        *,
        team_id: str = "default",
        model: str | None = None,
        planner_model: str | None = None,
        synthesizer_model: str | None = None,
        options: RunOptions | dict[str, Any] | None = None,
        hooks: Sequence[str] = (),
        mcp_servers: Sequence[McpServer] = (),
        fallbacks: Sequence[str] = (),
    ) -> None:
        refuse_removed_options(options, "Team(...)", "drop it from options")
        try:
            self._file = TeamFile(
                team_id=team_id,
                model=model,
                fallbacks=list(fallbacks),
                planner=RoleModel(model=planner_model),
                synthesizer=RoleModel(model=synthesizer_model),
                members=list(members) if members is not None else list(DEFAULT_MEMBERS),
                options=options if options is not None else RunOptions(),
                hooks=list(hooks),
                mcp_servers=list(mcp_servers),
            )
        except ValidationError as exc:  # the project's error, as for a team file
            raise team_error(exc, "Team(...)") from exc

    @classmethod
    def from_file(cls, path: str | Path) -> Team:
        """The team of a team file (.toml, .yaml or .json); ConfigError if it is invalid."""
        team = cls.__new__(cls)
        team._file = load_team_file(Path(path))
        return team

    def run(
        self,
        objective: str,
        *,
        redis_url: str | None = None,
        workers: int | None = None,
        model: str | None = None,
        api_base: str | None = None,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> RunResult:
        """Run the team on `objective` to its end and return the result (`teamctl run`).

        As `teamctl run` on Ctrl-C, a KeyboardInterrupt here, or `timeout` s passing, stops
        the coordinator and cancels the run (the run-scoped workers stop after the job in
        hand), then raises; `start` returns a Run whose `wait` leaves the run going instead."""
        run = self.start(
            objective,
            redis_url=redis_url,
            workers=workers,
            model=model,
            api_base=api_base,
            run_id=run_id,
        )
        try:
            return run.wait(timeout)
        except TimeoutError:
            run._stop_here()
            raise TimeoutError(
                f"run {run.run_id} did not end within {timeout} s; it was cancelled"
            ) from None
        except KeyboardInterrupt:
            run._stop_here()
            raise

    async def arun(self, objective: str, **kwargs: Any) -> RunResult:
        """`run` for asyncio code: the blocking parts run on a thread."""
        return await asyncio.to_thread(self.run, objective, **kwargs)

    def start(
        self,
        objective: str,
        *,
        redis_url: str | None = None,
        workers: int | None = None,
        model: str | None = None,
        api_base: str | None = None,
        run_id: str | None = None,
    ) -> Run:
        """Store the run and drive it on a thread; returns its handle at once. The team is
        checked first: a ConfigError here means nothing was written."""
        settings = load_settings()
        # Called by launch only once the team checked out: bad input starts no embedded server.
        started = launch(
            self._file,
            objective,
            model=model,
            api_base=api_base,
            redis_url=lambda: resolve_redis_url(redis_url, settings),
            run_id=run_id,
            settings=settings,
        )
        if started.model_source is ModelSource.OFFLINE:
            log.warning(
                "no model configured and no provider key set; using the built-in "
                "offline model (pass model= or set TEAMCTL_MODEL for a real one)"
            )
        plan = WorkerPlan(
            workers, embedded=is_embedded(redis_url, settings), idle_exit_s=DEFAULT_IDLE_EXIT_S
        )
        url = started.redis_url
        handle = Run(started.spec.run_id, url)
        handle._drive_in_thread(
            lambda: run_to_end(
                started.conn,
                url,
                started.spec,
                started.hooks,
                workers=plan,
                approval=ApprovalMode.WAIT,
                reporter=Reporter.to_log(log),
                settings=settings,
                interrupt=handle._interrupt,
            )
        )
        return handle


class Run:
    """A handle on one run: its id, its live state, and what a person may do to it.

    Its methods raise the project's errors: ConfigError (an unknown or finished run, bad
    input), InfraError (Redis unreachable for longer than the run's redis_outage_s, or refusing
    a command), and from `wait`/`events` RunFailed only when the coordinator here stopped
    without the run ending (`wait` also raises TimeoutError). A run that ends without success
    is a result, not an exception."""

    def __init__(self, run_id: str, redis_url: str) -> None:
        self.run_id = run_id
        self.redis_url = redis_url
        self._conn = connect(redis_url)
        self._run: RunHandle | None = None
        self._thread: threading.Thread | None = None
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._interrupt = threading.Event()
        """Set to stop the coordinator driving the run here (Team.run's timeout or Ctrl-C)."""

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    @property
    def _handle(self) -> RunHandle:
        """The run's records in Redis, its spec read once (ConfigError for an unknown run);
        from then on a Redis outage is ridden out for the run's redis_outage_s, as every
        teamctl process does."""
        if self._run is None:
            with redis_errors_as_infra():
                run = RunHandle.existing(self._conn, self.run_id)
            set_outage(self._conn, run.spec.options.redis_outage_s)
            self._run = run
        return self._run

    def status(self) -> RunStatus:
        """Where the run is now."""
        with redis_errors_as_infra():
            return self._handle.store.state().status

    def result(self) -> RunResult:
        """The result object as it stands (final once the run ended)."""
        with redis_errors_as_infra():
            return build_result(self._handle)

    def cancel(self) -> None:
        """Stop the run as `teamctl cancel` does (a finished run: ConfigError)."""
        from teamctl.coordinator.runs.run_control import cancel_run
        from teamctl.shared.lease import lease_owner

        with redis_errors_as_infra():
            cancel_run(
                RunHandle(
                    self._conn, self.run_id, spec=self._handle.spec, lease_owner=lease_owner()
                )
            )

    def add_budget(self, *, usd: float = 0.0, tokens: int = 0) -> None:
        """Raise the run's budget as `teamctl budget --add-usd/--add-tokens` does: a run
        paused awaiting_budget resumes (ConfigError for a finished run, a limit it does not
        have, or an amount that is not positive)."""
        from teamctl.coordinator.runs.run_control import parse_top_up, raise_budget

        added = parse_top_up(str(tokens) if tokens else None, str(usd) if usd else None)
        if added == (0, 0.0):
            raise ConfigError("add_budget needs usd or tokens above 0")
        with redis_errors_as_infra():
            raise_budget(self._handle, *added)

    def wait(self, timeout: float | None = None) -> RunResult:
        """Block until the run ended and return its result, whether it completed, failed or
        was cancelled (`status` and `error` say which); TimeoutError after `timeout` s. The
        same for a run started here and one attached to; RunFailed only if the coordinator
        here stopped without the run ending (another took its lease over)."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"run {self.run_id} still running after {timeout} s")
            self._raise_if_not_ended()
            return self._result or self.result()
        deadline = None if timeout is None else time.monotonic() + timeout
        from teamctl.coordinator.runs.run_follow import wait_for_end

        with redis_errors_as_infra():
            if not wait_for_end(self._handle, deadline):
                raise TimeoutError(f"run {self.run_id} still running after {timeout} s")
        return self.result()

    def _stop_here(self) -> None:
        """Stop the coordinator driving the run on this process's thread, then cancel the run
        as `teamctl run` does on Ctrl-C; a run that ended meanwhile is left as it is."""
        self._interrupt.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)  # it checks its lease at least every second
        with contextlib.suppress(ConfigError):  # it ended meanwhile
            self.cancel()

    def _raise_if_not_ended(self) -> None:
        """Raise what stopped the coordinator here, unless the run ended meanwhile (a planner
        or synthesizer failure, a rejected plan: RunFailed after the run's end was written)."""
        if self._error is None:
            return
        if isinstance(self._error, RunFailed) and self.status().finished:
            return
        raise self._error

    def events(self) -> Generator[RunEvent, None, None]:
        """Task state changes and bus messages, typed and in order, from the run's start until
        it ends (what `teamctl events RUN --json` prints, one model per line)."""
        return self._events(lambda: False)

    def _events(self, stop: Callable[[], bool]) -> Generator[RunEvent, None, None]:
        """`events`, also ending (after a last non-blocking read) once `stop` says so."""
        from teamctl.coordinator.runs.run_follow import run_events

        with redis_errors_as_infra():
            yield from run_events(self._handle, also_ended=lambda: stop() or self._driver_gone())
        if self._thread is not None and not stop():
            self._raise_if_not_ended()  # the coordinator here stopped without ending the run

    def _driver_gone(self) -> bool:
        """Whether this process drove the run and its coordinator thread has stopped (it may
        have died without writing the run's end: nothing more will come)."""
        return self._thread is not None and not self._thread.is_alive()

    async def aevents(self) -> AsyncIterator[RunEvent]:
        """`events` for asyncio code: each blocking read runs on a thread. Leaving the loop
        early (break, a cancelled await) stops the reader within one blocking read and closes
        it, its Redis connection with it."""
        stopped = threading.Event()
        events = self._events(stopped.is_set)
        turn = threading.Lock()  # a generator runs in one thread at a time: close waits its turn
        try:
            while (event := await asyncio.to_thread(_step, events, turn)) is not None:
                yield event
        finally:
            stopped.set()  # a read in flight returns after its current XREAD BLOCK
            # Shielded: a second cancellation must not leave the reader open.
            await asyncio.shield(asyncio.to_thread(_close, events, turn))

    def send(self, to: str, text: str) -> str:
        """A person's message, as `lead`, to one member (or `*`: every member); its id. It
        reaches the member's inbox: its next `team_read_messages` or dispatch input."""
        from teamctl.coordinator.runs.run_control import send_message

        with redis_errors_as_infra():
            message = send_message(self._handle, to, text)
        return message.id if message else ""

    async def await_result(self, timeout: float | None = None) -> RunResult:
        """`wait` for asyncio code."""
        return await asyncio.to_thread(self.wait, timeout)

    def _drive_in_thread(self, body: Callable[[], RunResult]) -> None:
        def target() -> None:
            try:
                self._result = body()
            except BaseException as exc:  # kept for wait(), which raises it in the caller
                self._error = exc

        self._thread = threading.Thread(
            target=target, name=f"teamctl-run-{self.run_id}", daemon=True
        )
        self._thread.start()


def _step(events: Generator[RunEvent, None, None], turn: threading.Lock) -> RunEvent | None:
    """The next event (None at the end), read while holding `turn`."""
    with turn:
        return next(events, None)


def _close(events: Generator[RunEvent, None, None], turn: threading.Lock) -> None:
    """Close the events generator once no read holds `turn`."""
    with turn:
        events.close()


def attach(run_id: str, *, redis_url: str | None = None) -> Run:
    """A handle on a run started elsewhere (another process, `teamctl run`)."""
    run = Run(run_id, resolve_redis_url(redis_url, load_settings()))
    run._handle  # noqa: B018  (an unknown run is a ConfigError now, not at first use)
    return run


__all__ = ["ConfigError", "Run", "Team", "TeamError", "attach"]
