"""The socket a worker fork server listens on (worker/fork_server.py) and the variable that names
one, apart from the client's request models (fork_server_client.py): the CLI binds a socket
before it has imported pydantic, to start its server first (coordinator/local_workers/
early_parent.py)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

FORK_SERVER_ENV = "TEAMCTL_WORKER_FORK_SERVER"
"""The socket of a fork server this user runs, or NO_FORK_SERVER; unset, teamctl starts its own."""
NO_FORK_SERVER = "off"
"""FORK_SERVER_ENV's value that has each worker executed, importing everything itself."""


def listen(socket_path: Path | str) -> socket.socket:
    """The server's socket, open to this user only; clients may connect (and wait for their
    reply) while the server still preloads."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # only this user may ask: a request carries the worker's secrets
    try:
        listener.bind(str(socket_path))
    finally:
        os.umask(old_mask)
    listener.listen(64)
    if stat.S_IMODE(os.stat(socket_path).st_mode) & 0o077:
        raise RuntimeError(f"{socket_path} is open to other users")
    return listener
