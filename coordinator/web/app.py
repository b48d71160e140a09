"""`teamctl dashboard`'s ASGI app (Starlette): the runs, a run, the teams and a team as HTML
read from Redis, their live changes as server-sent events, and (with --allow-control only) the
CLI's own cancel, approve/reject, budget and send. Every request needs the token printed at
start (see `access`), reads too unless they are opened; every control needs it itself.
Importing this module imports Starlette: only the dashboard command does."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import redis
import redis.asyncio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from teamctl.coordinator.runs.run_control import (
    cancel_run,
    parse_top_up,
    raise_budget,
    record_plan_decision,
    send_message,
)
from teamctl.coordinator.web import sse
from teamctl.coordinator.web.access import COOKIE_NAME, TOKEN_HEADER, Access, ReadGate, same_secret
from teamctl.coordinator.web.render import render, run_values
from teamctl.coordinator.web.run_page_data import MESSAGES_SHOWN, TASKS_DETAILED, load_run_view
from teamctl.coordinator.web.runs_list_data import RUNS_SHOWN, live_rows, run_rows, runs_started_id
from teamctl.coordinator.web.team_data import load_team_view
from teamctl.shared.bus import LEAD
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.ids import check_request_id, check_run_id, check_task_id, check_team_name
from teamctl.shared.keys import RUNS_STARTED, KeySpace, RunKeys, TeamKeys
from teamctl.shared.lease import lease_owner
from teamctl.shared.redis.connection import SOCKET_TIMEOUT_S, connect
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.teams.team_store import TeamStore, list_teams
from teamctl.shared.teams.transcripts import load_transcript

LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
"""On every answer: a page runs no inline script, loads nothing from elsewhere and cannot be
framed by another site (its control forms clicked through), whatever its text says."""
MAX_STREAMS = 64
"""Live pages served at once: each holds a Redis connection in XREAD BLOCK, on a Redis the
workers share, so more are refused (503) rather than exhaust its clients."""


@dataclass(frozen=True)
class DashboardConfig:
    redis_url: str
    token: str
    """Printed at start: required by every request (once, for a cookie) unless `open_reads`,
    and by every control request itself (compared in constant time)."""
    allow_control: bool = False
    open_reads: bool = False
    """--no-auth: pages, streams and static files answer without the token."""
    cookie_name: str = COOKIE_NAME
    """`serve` adds the port: two dashboards on one host do not sign each other out."""
    idle_block_ms: int = sse.IDLE_BLOCK_MS
    loopback_only: bool = True
    """Bound to loopback: answer only requests addressed to a loopback name, so a web page whose
    domain is re-pointed at 127.0.0.1 (DNS rebinding) cannot read the pages from a browser."""


@dataclass
class Deps:
    """What the handlers use: the config and the two Redis clients (blocking for pages, run
    in Starlette's thread pool; asyncio for the event streams)."""

    config: DashboardConfig
    conn: redis.Redis
    aconn: Any  # redis.asyncio.Redis
    open_streams: int = 0


def create_app(config: DashboardConfig) -> Starlette:
    """The app for `config`; its Redis clients open at start-up and close at shutdown."""
    holder: dict[str, Deps] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        conn = connect(config.redis_url)
        # Its reads outlast the longest XREAD BLOCK of a stream (redis-py's own timeout would
        # cut an idle page's read short).
        aconn = redis.asyncio.Redis.from_url(
            config.redis_url,
            decode_responses=True,
            socket_timeout=config.idle_block_ms / 1000 + SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            max_connections=MAX_STREAMS + 8,
        )
        holder["deps"] = Deps(config, conn, aconn)
        try:
            yield
        finally:
            await aconn.aclose()
            conn.close()

    def deps() -> Deps:
        return holder["deps"]

    routes = [
        Route("/", page(deps, runs_page)),
        Route("/runs-body", page(deps, runs_body)),
        Route("/runs-stream", stream(deps, runs_stream)),
        Route("/runs/{run_id}", page(deps, run_page)),
        Route("/runs/{run_id}/body", page(deps, run_body)),
        Route("/runs/{run_id}/stream", stream(deps, run_stream)),
        Route("/runs/{run_id}/tasks/{task_id}/transcript", page(deps, transcript_page)),
        Route("/teams", page(deps, teams_page)),
        Route("/teams/{team}", page(deps, team_page)),
        Route("/teams/{team}/body", page(deps, team_body)),
        Route("/teams/{team}/stream", stream(deps, team_stream)),
        Route("/teams/{team}/members/{name}/transcript", page(deps, member_transcript_page)),
        Mount(
            "/static",
            StaticFiles(directory=str(files("teamctl.coordinator.web").joinpath("static"))),
        ),
    ]
    if config.allow_control:
        routes += [
            Route(f"/runs/{{run_id}}/{action}", control(deps, handler), methods=["POST"])
            for action, handler in CONTROLS.items()
        ]
        routes += [
            Route(f"/teams/{{team}}/{action}", team_control(deps, handler), methods=["POST"])
            for action, handler in TEAM_CONTROLS.items()
        ]
    middleware = [Middleware(SecurityHeaders)]
    if config.loopback_only:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES))
    # A secret of its own for the cookie, made at each start and never printed.
    middleware.append(
        Middleware(
            ReadGate,
            access=Access(
                token=config.token,
                session=secrets.token_urlsafe(32),
                cookie_name=config.cookie_name,
                open_reads=config.open_reads,
            ),
        )
    )
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)


class SecurityHeaders:
    """ASGI middleware adding SECURITY_HEADERS to every response: pages, streams, static files,
    control answers and Starlette's own errors."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        await self.app(scope, receive, with_headers)


Handler = Callable[[Deps, Request], Response]


def page(deps: Callable[[], Deps], handler: Handler) -> Callable[[Request], Response]:
    """A page handler (run in the thread pool) whose known errors become a one-line answer:
    a bad id or a missing run is the caller's (404), never a traceback."""

    def endpoint(request: Request) -> Response:
        try:
            response = handler(deps(), request)
        except (ConfigError, ValueError) as exc:
            response = PlainTextResponse(str(exc), status_code=404)
        return response

    return endpoint


StreamHandler = Callable[[Deps, Request], Awaitable[Response]]


def stream(
    deps: Callable[[], Deps],
    handler: StreamHandler,
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        d = deps()
        if d.open_streams >= MAX_STREAMS:
            return PlainTextResponse(
                f"{MAX_STREAMS} live pages are open already: close some, then reload",
                status_code=503,
            )
        try:
            return await handler(d, request)
        except (ConfigError, ValueError) as exc:
            return PlainTextResponse(str(exc), status_code=404)

    return endpoint


def html(text: str) -> HTMLResponse:
    return HTMLResponse(text)


# --- runs --------------------------------------------------------------------------------------


def runs_values(d: Deps) -> dict[str, Any]:
    # Where the runs-started stream stands is read first: a run created between the two reads
    # is then announced again rather than missed.
    started_id = runs_started_id(d.conn)
    rows = run_rows(d.conn)
    live = live_rows(rows)
    return {
        "rows": rows,
        "now_ms": now_ms(),
        "live_ids": ",".join(r.summary.run_id for r in live),
        "cursor": sse.SEPARATOR.join([started_id, *(r.last_event_id for r in live)]),
    }


def runs_page(d: Deps, request: Request) -> Response:
    return html(
        render("runs.html", standalone=False, control=d.config.allow_control, **runs_values(d))
    )


def runs_body(d: Deps, request: Request) -> Response:
    return html(render("_runs_table.html", **runs_values(d)))


async def runs_stream(d: Deps, request: Request) -> Response:
    """Runs created from now on, and the events of the live runs the page listed (ids checked,
    at most the page's count)."""
    ids = [check_run_id(r) for r in request.query_params.get("runs", "").split(",") if r]
    ids = ids[:RUNS_SHOWN]
    sources = [
        sse.Source(RUNS_STARTED, "run", ""),
        *(sse.Source(RunKeys(r).events, "task", r) for r in ids),
    ]
    cursor = start_cursor(request, len(sources))
    return sse_response(d, sse.follow(d.aconn, sources, cursor, None, d.config.idle_block_ms))


def start_cursor(request: Request, count: int) -> list[str]:
    """Where a stream starts: Last-Event-ID (a reconnect), else the page's own position
    (`after`), else the streams' start."""
    return (
        sse.parse_cursor(request.headers.get("last-event-id"), count)
        or sse.parse_cursor(request.query_params.get("after"), count)
        or ["0-0"] * count
    )


def sse_response(d: Deps, frames: AsyncIterator[str]) -> StreamingResponse:
    """The frames as an event stream, counted among the open streams while it lasts."""

    async def counted() -> AsyncIterator[str]:
        d.open_streams += 1
        try:
            async for text in frames:
                yield text
        finally:
            d.open_streams -= 1

    return StreamingResponse(counted(), media_type="text/event-stream", headers=SSE_HEADERS)


# --- a run -------------------------------------------------------------------------------------


def run_handle(d: Deps, request: Request) -> RunHandle:
    return RunHandle.existing(d.conn, check_run_id(request.path_params["run_id"]))


def filters(request: Request) -> dict[str, str | None]:
    return {
        "member": request.query_params.get("member") or None,
        "type_": request.query_params.get("type") or None,
    }


def run_page(d: Deps, request: Request) -> Response:
    # Transcripts on a page of their own: the body is read again after every change.
    view = load_run_view(
        run_handle(d, request),
        with_transcripts=False,
        messages_shown=MESSAGES_SHOWN,
        tasks_detailed=TASKS_DETAILED,
    )
    return html(
        render(
            "run.html",
            standalone=False,
            control=d.config.allow_control,
            note=request.query_params.get("note"),
            **filters(request),
            **run_values(view, now_ms()),
        )
    )


def run_body(d: Deps, request: Request) -> Response:
    view = load_run_view(
        run_handle(d, request),
        with_transcripts=False,
        messages_shown=MESSAGES_SHOWN,
        tasks_detailed=TASKS_DETAILED,
    )
    return html(
        render("_run_body.html", standalone=False, **filters(request), **run_values(view, now_ms()))
    )


def transcript_page(d: Deps, request: Request) -> Response:
    run = run_handle(d, request)
    task_id = check_task_id(request.path_params["task_id"])
    if run.board.get(task_id) is None:
        raise ConfigError(f"run {run.run_id} has no task {task_id}")
    kept = Transcripts(run.conn, run.keys, run.scripts).load_many([task_id])
    return html(
        render(
            "transcript.html",
            standalone=False,
            control=d.config.allow_control,
            run_id=run.run_id,
            task_id=task_id,
            transcript=kept.get(task_id),
        )
    )


async def run_stream(d: Deps, request: Request) -> Response:
    keys = RunKeys(check_run_id(request.path_params["run_id"]))
    if not await d.aconn.exists(keys.spec):
        raise ConfigError(f"no run {keys.run_id}")

    async def ended() -> bool:
        status = await d.aconn.hget(keys.state, "status")
        return status is None or RunStatus(status).finished

    return follow_space(d, request, keys, ended)


# --- teams -------------------------------------------------------------------------------------


def teams_page(d: Deps, request: Request) -> Response:
    return html(
        render(
            "teams.html", standalone=False, control=d.config.allow_control, teams=list_teams(d.conn)
        )
    )


def team_store(d: Deps, request: Request) -> TeamStore:
    return TeamStore(d.conn, check_team_name(request.path_params["team"]))


def team_page(d: Deps, request: Request) -> Response:
    view = load_team_view(team_store(d, request))
    return html(
        render(
            "team.html",
            standalone=False,
            control=d.config.allow_control,
            team=view,
            note=request.query_params.get("note"),
            now_ms=now_ms(),
        )
    )


def team_body(d: Deps, request: Request) -> Response:
    view = load_team_view(team_store(d, request))
    return html(render("_team_body.html", team=view, now_ms=now_ms()))


def member_transcript_page(d: Deps, request: Request) -> Response:
    """A teammate's or the lead's transcript, a turn a page (`?turn=N`; the last by default,
    0 for memory's messages from before any recorded turn)."""
    transcript = load_transcript(team_store(d, request), request.path_params["name"])
    wanted = request.query_params.get("turn")
    at = len(transcript.turns) - 1  # -1: nothing in memory yet
    if wanted is not None:
        number = int(wanted)  # a ValueError is the caller's 404, as a bad id is
        found = [i for i, t in enumerate(transcript.turns) if (t.turn or 0) == number]
        if not found:
            transcript.only(number)  # ConfigError: a one-line 404 naming the turns it holds
        at = found[0]
    return html(
        render(
            "member_transcript.html",
            standalone=False,
            control=d.config.allow_control,
            transcript=transcript,
            at=at,
        )
    )


async def team_stream(d: Deps, request: Request) -> Response:
    keys = TeamKeys(check_team_name(request.path_params["team"]))
    if not await d.aconn.exists(keys.meta):
        raise ConfigError(f"no team {keys.team}")
    return follow_space(d, request, keys, None)


def follow_space(
    d: Deps, request: Request, keys: KeySpace, ended: Callable[[], Awaitable[bool]] | None
) -> StreamingResponse:
    """A run's or a team's page stream: its task changes and its bus, from the page's cursor."""
    sources = [
        sse.Source(keys.events, "task", keys.name),
        sse.Source(keys.bus, "message", keys.name),
    ]
    return sse_response(
        d, sse.follow(d.aconn, sources, start_cursor(request, 2), ended, d.config.idle_block_ms)
    )


# --- control (--allow-control) -----------------------------------------------------------------


ControlAction = Callable[[RunHandle, dict[str, str]], str]
TeamAction = Callable[[TeamStore, dict[str, str]], str]
Steer = Callable[[Deps, Request, dict[str, str]], str]
"""Steers a run or a team through the CLI's own functions; returns the page to go back to."""


def guarded(deps: Callable[[], Deps], steer: Steer) -> Callable[[Request], Awaitable[Response]]:
    """A control POST: 403 without the token itself (the cookie is not enough: a browser sends
    it from a page of any port of this host), 409 with the one-line reason when the run or
    team refuses, else back to its page (303)."""

    async def endpoint(request: Request) -> Response:
        d = deps()
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        if not same_secret(request.headers.get(TOKEN_HEADER) or form.get("token"), d.config.token):
            return PlainTextResponse("a valid control token is required", status_code=403)
        try:
            back = await run_in_threadpool(steer, d, request, form)
        except (ConfigError, TeamError, ValueError) as exc:
            return PlainTextResponse(str(exc), status_code=409)
        return RedirectResponse(back, status_code=303)

    return endpoint


def control(
    deps: Callable[[], Deps],
    action: ControlAction,
) -> Callable[[Request], Awaitable[Response]]:
    """A run's control: its handle (holding a lease owner, as `teamctl cancel` does)."""

    def steer(d: Deps, request: Request, form: dict[str, str]) -> str:
        run_id = check_run_id(request.path_params["run_id"])
        note = action(RunHandle.existing(d.conn, run_id, lease_owner=lease_owner()), form)
        return f"/runs/{run_id}?note={note}"

    return guarded(deps, steer)


def team_control(
    deps: Callable[[], Deps],
    action: TeamAction,
) -> Callable[[Request], Awaitable[Response]]:
    """A team's control: its store, reconciled first as the `team` verbs that wake teammates
    do (mail to a teammate whose worker died reruns its turn)."""

    def steer(d: Deps, request: Request, form: dict[str, str]) -> str:
        store = TeamStore(d.conn, check_team_name(request.path_params["team"]))
        store.meta()
        store.scheduler.reconcile()
        return f"/teams/{store.team}?note={action(store, form)}"

    return guarded(deps, steer)


def do_cancel(run: RunHandle, form: dict[str, str]) -> str:
    return "cancelled" if cancel_run(run) else "cancel-requested"


def do_approve(run: RunHandle, form: dict[str, str]) -> str:
    record_plan_decision(run, True, None)
    return "approved"


def do_reject(run: RunHandle, form: dict[str, str]) -> str:
    record_plan_decision(run, False, form.get("reason") or None)
    return "rejected"


def do_send(run: RunHandle, form: dict[str, str]) -> str:
    send_message(run, form.get("to", ""), form.get("text", ""))
    return "sent"


def top_up(form: dict[str, str]) -> tuple[int, float]:
    """The form's add_tokens / add_usd (blank: none), checked as `teamctl budget` checks them;
    at least one."""
    tokens, usd = parse_top_up(form.get("add_tokens") or None, form.get("add_usd") or None)
    if not (tokens or usd):
        raise ConfigError("give add_usd or add_tokens: the amount to add to the budget")
    return tokens, usd


def do_budget(run: RunHandle, form: dict[str, str]) -> str:
    raise_budget(run, *top_up(form))
    return "budget-raised"


def do_team_budget(store: TeamStore, form: dict[str, str]) -> str:
    store.raise_budget(*top_up(form))
    return "budget-raised"


def do_team_send(store: TeamStore, form: dict[str, str]) -> str:
    store.messages.send(LEAD, form.get("to", ""), form.get("text", ""))
    return "sent"


def do_team_review(store: TeamStore, form: dict[str, str]) -> str:
    approve = form.get("decision") == "approve"
    store.requests.review_plan(
        check_request_id(form.get("request_id", "")), approve, form.get("feedback", "")
    )
    return "approved" if approve else "rejected"


CONTROLS: dict[str, ControlAction] = {
    "cancel": do_cancel,
    "approve": do_approve,
    "reject": do_reject,
    "send": do_send,
    "budget": do_budget,
}
TEAM_CONTROLS: dict[str, TeamAction] = {
    "send": do_team_send,
    "review": do_team_review,
    "budget": do_team_budget,
}
