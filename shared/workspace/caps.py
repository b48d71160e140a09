"""Where a workspace's files live and how much it may hold: light enough for option parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from teamctl.shared.errors import ConfigError

WorkspaceStore = Literal["local", "redis"]
"""Where a workspace's files live: a directory on one host, or the Redis every worker reaches."""
WorkspaceSetting = Literal["auto", "local", "redis"]
"""TEAMCTL_WORKSPACE_STORE: `auto` is `local` only when no other host can reach the Redis (a
unix socket), else `redis`."""

DEFAULT_FILE_MAX_BYTES = 1 << 20
MAX_FILE_MAX_BYTES = 64 << 20
DEFAULT_WORKSPACE_MAX_BYTES = 64 << 20
MAX_WORKSPACE_MAX_BYTES = 1 << 30
DEFAULT_WORKSPACE_MAX_FILES = 10_000
MAX_WORKSPACE_MAX_FILES = 1_000_000
PATH_RECORD_BYTES = 512
"""What Redis's own records of one path cost, counted toward workspace_max_bytes besides the
content and the path itself (twice: a path is a field of two hashes). Measured with `MEMORY
USAGE key SAMPLES 0` on Redis 6.2: a file's blob key (130 bytes when empty, with a 22-character
run id; its name grows with the id, up to 128 characters), its field in `files` (~90 bytes beyond
the path: the 32-digit blob id and the entry) and in `file_versions` (~75) come to ~290 bytes
beyond its two path copies, ~420 with the longest run id and 3 KB paths; a deleted path's
`file_versions` field and `file_deletions` entry to ~175. 512 covers both, with room for the
allocator's rounding of the small parts."""


@dataclass(frozen=True)
class FileCaps:
    """The largest file, the largest workspace (bytes: content, paths and PATH_RECORD_BYTES per
    path kept) and the most files a save may leave."""

    file_max_bytes: int = DEFAULT_FILE_MAX_BYTES
    workspace_max_bytes: int = DEFAULT_WORKSPACE_MAX_BYTES
    workspace_max_files: int = DEFAULT_WORKSPACE_MAX_FILES


class WorkspaceElsewhere(ConfigError):
    """A worker on one host was handed work on a local workspace that lives on another."""


def check_workspace_host(
    owner: str, created_on: str | None, here: str, who: str = "worker"
) -> None:
    """WorkspaceElsewhere unless this host (`here`) is the one that created `owner`'s local
    workspace (`created_on`; None: stored before hosts were recorded). `who` is this process,
    as the line names it."""
    if created_on is None or created_on == here:
        return
    raise WorkspaceElsewhere(
        f"{owner} keeps its files in a directory on host {created_on}, and this {who} is on "
        f"host {here}: refused, or its files would split; runs and teams created with "
        "TEAMCTL_WORKSPACE_STORE=redis share files across hosts"
    )
