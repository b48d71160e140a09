"""Where a workspace's files live and how much it may hold: light enough for option parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WorkspaceStore = Literal["local", "redis"]
"""Where a workspace's files live: a directory on one host, or the Redis every worker reaches."""
WorkspaceSetting = Literal["auto", "local", "redis"]
"""TEAMCTL_WORKSPACE_STORE: `auto` is `local` when only this host can reach the Redis."""

DEFAULT_FILE_MAX_BYTES = 1 << 20
MAX_FILE_MAX_BYTES = 64 << 20
DEFAULT_WORKSPACE_MAX_BYTES = 64 << 20
MAX_WORKSPACE_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class FileCaps:
    """The largest file and the largest workspace (bytes) a save may leave."""

    file_max_bytes: int = DEFAULT_FILE_MAX_BYTES
    workspace_max_bytes: int = DEFAULT_WORKSPACE_MAX_BYTES
