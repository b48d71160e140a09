"""Where a worker's stdio MCP servers keep what `npx` and `uvx` download, so that a package is
fetched once per worker rather than once per attempt (each attempt's HOME is new and empty).

One directory per worker process, under the state dir's `mcp-caches` (0700, like the state dir):
outside every workspace and every HOME a tool gets, so no file tool reaches it and `bash` is not
told where it is. A worker removes its own when it stops; one a killed worker left is removed by
the next worker of this host to start.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from teamctl.shared.process.private_files import private_dir

log = logging.getLogger(__name__)
CACHES_ENV = "TEAMCTL_MCP_CACHES"
"""Names a worker's cache directory to the jobs it forks (a TEAMCTL_ variable: never given to a
tool or, through `env:`, to a server)."""
CACHES_DIR = "mcp-caches"


def package_cache_env(root: Path) -> dict[str, str]:
    """The variables that point npm/npx and uv/uvx at `root`'s caches."""
    return {"npm_config_cache": str(root / "npm"), "UV_CACHE_DIR": str(root / "uv")}


def worker_caches(state_dir: Path, host: str, pid: int) -> Path:
    """Create the caches of worker `pid` on `host` (0700), removing those of this host's
    workers that are gone; their directory."""
    parent = private_dir(state_dir / CACHES_DIR)
    _remove_dead(parent, host)
    root = private_dir(parent / f"{host}-{pid}")
    for tool in ("npm", "uv"):
        private_dir(root / tool)
    return root


def caches_from_env(environ: Mapping[str, str]) -> Path | None:
    """The caches a worker named to this job (None outside a teamctl worker)."""
    value = environ.get(CACHES_ENV)
    return Path(value) if value else None


def remove_caches(root: Path) -> None:
    """Remove a stopping worker's caches."""
    shutil.rmtree(root, ignore_errors=True)


def _remove_dead(parent: Path, host: str) -> None:
    """Remove the caches of this host's workers whose process is gone."""
    for entry in parent.glob(f"{host}-*"):
        pid = entry.name.rpartition("-")[2]
        if pid.isdigit() and not _exists(int(pid)):
            log.info("removing the MCP package caches of a stopped worker: %s", entry)
            shutil.rmtree(entry, ignore_errors=True)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
