"""Where a worker's stdio MCP servers keep what `npx` and `uvx` download, so that a package is
fetched once per worker rather than once per attempt (each attempt's HOME is new and empty).

One directory per worker process, under the state dir's `mcp-caches` (0700, like the state dir):
outside every workspace and every HOME a tool gets, so no file tool reaches it and `bash` is not
told where it is. A worker removes its own when it stops; one a killed worker left is removed by
the next worker of this host to create its own.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from teamctl.shared.process.pids import pid_alive
from teamctl.shared.process.private_files import private_dir

log = logging.getLogger(__name__)
CACHES_ENV = "TEAMCTL_MCP_CACHES"
"""Names a worker's cache directory to the jobs it forks (a TEAMCTL_ variable: never given to a
tool or, through `env:`, to a server)."""
CACHES_DIR = "mcp-caches"


def caches_path(state_dir: Path, host: str, pid: int) -> Path:
    """Where worker `pid` on `host` keeps its caches (created by the first server to need
    them: a worker that never starts one leaves no directory)."""
    return state_dir / CACHES_DIR / f"{host}-{pid}"


def package_cache_env(root: Path) -> dict[str, str]:
    """The variables that point npm/npx and uv/uvx at `root`'s caches, created if missing
    (0700; the caches of this host's workers that are gone are removed then)."""
    npm, uv = root / "npm", root / "uv"
    if not (npm.is_dir() and uv.is_dir()):
        parent = private_dir(root.parent)
        _remove_dead(parent, root.name.rpartition("-")[0])
        private_dir(npm)
        private_dir(uv)
    return {"npm_config_cache": str(npm), "UV_CACHE_DIR": str(uv)}


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
        if pid.isdigit() and not pid_alive(int(pid)):
            log.info("removing the MCP package caches of a stopped worker: %s", entry)
            shutil.rmtree(entry, ignore_errors=True)
