"""Run the dashboard: bind the socket first (a port in use is a one-line error, and port 0
gets a free one to print), print where it listens, as a URL that carries the token (or, with
reads open, the token for control alone), then serve with uvicorn until interrupted."""

from __future__ import annotations

import secrets
import socket

import click
import uvicorn
from teamctl.coordinator.web.access import COOKIE_NAME, TOKEN_PARAM
from teamctl.coordinator.web.app import DashboardConfig, create_app
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.hosts import is_loopback_host
from teamctl.shared.redis.connection import SentinelURL, connect


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; ConfigError saying what to change if it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; pass "
            "another --port (0: any free one) or --host"
        ) from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    redis_url: str, *, host: str, port: int, allow_control: bool, open_reads: bool = False
) -> None:
    """Serve the dashboard on host:port until Ctrl-C."""
    if SentinelURL.parse(redis_url) is not None:
        raise ConfigError(
            "the dashboard reads Redis through redis://, rediss:// or unix:// "
            "URLs: pass the primary's URL with --redis-url"
        )
    connect(redis_url).close()  # an unreachable Redis is one line now, not a failed start-up
    token = secrets.token_urlsafe(24)
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    announce(host, bound_port, token, allow_control=allow_control, open_reads=open_reads)
    app = create_app(
        DashboardConfig(
            redis_url=redis_url,
            token=token,
            allow_control=allow_control,
            open_reads=open_reads,
            cookie_name=f"{COOKIE_NAME}_{bound_port}",
            loopback_only=is_loopback_host(host),
        )
    )
    # log_config=None: uvicorn's records go to the CLI's printable handler, not to handlers
    # of its own that would write a request's decoded path raw.
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            log_config=None,
            lifespan="on",
            # live pages never end by themselves
            timeout_graceful_shutdown=2,
        )
    )
    server.run(sockets=[sock])


def announce(host: str, port: int, token: str, *, allow_control: bool, open_reads: bool) -> None:
    """The start-up lines on stderr: the URL to open (carrying the token unless reads are
    open), the token again where control needs it typed, and a note off loopback."""
    shown = f"[{host}]" if ":" in host else host
    mode = "control on" if allow_control else "read-only"
    if open_reads:
        click.echo(
            f"teamctl dashboard: http://{shown}:{port}/ ({mode}; reads need no token: --no-auth)",
            err=True,
        )
    else:
        click.echo(
            f"teamctl dashboard: http://{shown}:{port}/?{TOKEN_PARAM}={token} ({mode})", err=True
        )
    if allow_control:
        click.echo(f"control token: {token}", err=True)
    if not is_loopback_host(host):
        click.echo(
            f"note: listening on {host}, not loopback: "
            + (
                "anyone who reaches it reads what the models wrote"
                if open_reads
                else "the token and the pages cross the network unencrypted (http)"
            )
            + ("; control needs the token" if allow_control else ""),
            err=True,
        )
