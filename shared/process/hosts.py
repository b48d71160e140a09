"""Hosts: whether a host name or address stays on this machine (the one test behind sending
secrets only over loopback and serving the dashboard on loopback), and which host this process
runs on (where a local workspace lives)."""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

PROC = Path("/proc")
INIT_NET_NAMESPACE_INODE = 0xEFFFFFF9
"""The inode of the machine's first network namespace on kernels that fix it (Linux 6.x:
PROC_NET_INIT_INO); older kernels number it at boot."""


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1), as a URL or a bind names it."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def this_host(proc: Path = PROC) -> str:
    """This process's host as a workspace names it: the host name, and, in a network namespace
    other than the machine's own, that namespace's inode (`name/net:4026532174`).

    Containers and network namespaces on one machine are hosts of their own (each sees a disk of
    its own, or may), while the machine's own processes keep the bare name across reboots and
    kernel upgrades, which renumber namespaces. The machine's namespace is the one its first
    process (pid 1, of this pid namespace: a container's own init in a container) is in; when
    that cannot be read (another user's process), the fixed inode of newer kernels tells."""
    name = socket.gethostname()
    try:
        mine = os.stat(proc / "self" / "ns" / "net").st_ino
    except OSError:  # no /proc (not Linux): the host name is all there is
        return name
    try:
        machine = os.stat(proc / "1" / "ns" / "net").st_ino
    except OSError:
        machine = INIT_NET_NAMESPACE_INODE
    return name if mine == machine else f"{name}/net:{mine}"
