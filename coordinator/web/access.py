"""Who may read the dashboard: the token printed at start, traded once for a cookie. The
printed URL carries it as `?token=`; that visit sets an HttpOnly, SameSite=Strict cookie and
redirects to the same URL without it, so the token stays out of history and referrers. Every
other request, pages, streams and static files alike, needs that cookie or the token in the
X-Teamctl-Token header, unless reads are open (--no-auth). Control is not decided here: every
control POST carries the token itself."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_HEADER = "x-teamctl-token"
TOKEN_PARAM = "token"
COOKIE_NAME = "teamctl_dashboard"
NOT_SIGNED_IN = (
    "this dashboard needs its token: open the URL `teamctl dashboard` printed "
    "when it started (it ends in ?token=...)\n"
)


@dataclass(frozen=True)
class Access:
    """The secrets of one dashboard start."""

    token: str
    """Printed at start: opens reads, traded once for the cookie or sent in the header."""
    session: str
    """The cookie's value, never printed. A browser sends a host's cookies to every port of
    it, so a server of another local user may be handed it: it opens reads, never control."""
    cookie_name: str = COOKIE_NAME
    """Per port (set by `serve`), so two dashboards on one host do not sign each other out."""
    open_reads: bool = False
    """--no-auth: reads need nothing; control still needs the token."""


def same_secret(given: str | None, expected: str) -> bool:
    """`given` is `expected`, compared in constant time (an empty one never is)."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def token_ok(access: Access, given: str | None) -> bool:
    """The request carries the dashboard's token (a control's form field or header)."""
    return same_secret(given, access.token)


def signed_in(access: Access, request: Request) -> bool:
    """The request carries the cookie the printed URL set, or the token in its header (a
    script's reads)."""
    return same_secret(request.cookies.get(access.cookie_name), access.session) or token_ok(
        access, request.headers.get(TOKEN_HEADER)
    )


def trade_token(access: Access, request: Request) -> Response:
    """The printed URL's visit: the right token sets the cookie and sends the browser to the
    same URL without the token (303); a wrong one is refused as no token is (with reads open,
    it is only dropped from the URL)."""
    right = token_ok(access, request.query_params.get(TOKEN_PARAM))
    if not right and not access.open_reads:
        return refused()
    url = request.url.remove_query_params(TOKEN_PARAM)
    response = RedirectResponse(
        url.path + (f"?{url.query}" if url.query else ""),
        status_code=303,
        headers={"Cache-Control": "no-store"},
    )
    if right:
        response.headers.append(
            "set-cookie",
            f"{access.cookie_name}={access.session}; Path=/; HttpOnly; SameSite=Strict",
        )
    return response


def refused() -> Response:
    return PlainTextResponse(NOT_SIGNED_IN, status_code=401, headers={"Cache-Control": "no-store"})


class ReadGate:
    """ASGI middleware: every HTTP request signed in (or reads open), else 401 with the line
    that says where the token is; `?token=` on a GET traded for the cookie first."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if TOKEN_PARAM in request.query_params and request.method in ("GET", "HEAD"):
            await trade_token(self.access, request)(scope, receive, send)
        elif self.access.open_reads or signed_in(self.access, request):
            await self.app(scope, receive, send)
        else:
            await refused()(scope, receive, send)
