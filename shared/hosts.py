"""Whether a host name or address stays on this machine: the one test behind sending secrets
only over loopback, keeping a workspace local and serving the dashboard on loopback."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1), as a URL or a bind names it."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
