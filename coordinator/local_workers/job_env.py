"""What a worker's jobs take from the environment of whoever started it, kept as keyed digests.

A pool worker outlives the command that started it and keeps that command's environment: a
provider key set later, a new PYTHONPATH or another project directory would never reach its jobs.
So the pool records, for each worker, a digest of every variable (HMAC with a per-state-dir salt:
names are kept, values never) plus the working directory and the installed teamctl, and a run
compares the ones its jobs depend on (`job_variables`) with its own.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from teamctl.shared.process.private_files import write_private

WORKING_DIRECTORY = "working directory"
"""The entry for the directory a worker starts in: RQ puts it first on sys.path (Python tools)."""
INSTALLED_TEAMCTL = "teamctl install"
"""The entry for the interpreter and the teamctl code a worker runs."""
TRACKED_PREFIXES = (
    "TEAMCTL_",
    "LITELLM_",
    "OPENAI_",
    "ANTHROPIC_",
    "AZURE_",
    "AWS_",
    "VERTEX",
    "GOOGLE_",
    "GEMINI_",
    "MISTRAL_",
    "GROQ_",
    "DEEPSEEK_",
    "OPENROUTER_",
    "COHERE_",
    "TOGETHER",
    "FIREWORKS",
    "HUGGINGFACE",
    "HF_",
    "OLLAMA_",
    "XAI_",
    "PERPLEXITY",
    "DATABRICKS_",
    "WATSONX_",
    "BEDROCK_",
    "NVIDIA_NIM",
    "RQ_",
    "OTEL_",
)
"""Families of variables litellm (or teamctl, or RQ, or OpenTelemetry) reads: provider keys,
bases, regions, where traces go."""
TRACKED_SUFFIXES = ("_API_KEY", "_API_BASE", "_BASE_URL", "_API_VERSION", "_API_TOKEN")
TRACKED_NAMES = frozenset(
    {
        "PYTHONPATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "SSL_VERIFY",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "REDIS_URL",
    }
)
PLUMBING = frozenset(
    {"TEAMCTL_PARENT_PID", "TEAMCTL_PRELOADED", "RQ_REDIS_URL", "RQ_CONFIG", "RQ_CONNECTION_CLASS"}
)
"""Variables teamctl sets on the workers it starts itself: never a difference."""
SALT_BYTES = 32


def tracked(name: str) -> bool:
    """Whether jobs depend on variable `name` (a provider's credentials or settings, teamctl's
    own, the import path, TLS and proxy settings)."""
    if name in PLUMBING:
        return False
    return (
        name in TRACKED_NAMES
        or name.startswith(TRACKED_PREFIXES)
        or name.endswith(TRACKED_SUFFIXES)
    )


def job_variables(
    environ: Mapping[str, str], recorded: Iterable[str], also: Iterable[str] = ()
) -> set[str]:
    """The entries a run compares: tracked variables set now or when the worker started, the
    names its team references (`also`: MCP `env:` entries), the directory and the install."""
    names = {name for name in (*environ, *recorded) if tracked(name)}
    return names | set(also) | {WORKING_DIRECTORY, INSTALLED_TEAMCTL}


class EnvDigests:
    """Keyed digests of an environment under one salt (the pool's)."""

    def __init__(self, salt: bytes) -> None:
        self.salt = salt

    def of(self, environ: Mapping[str, str], cwd: str) -> dict[str, str]:
        """Every variable's digest, and the working directory's and the install's."""
        digests = {
            name: self._digest(name, value)
            for name, value in environ.items()
            if name not in PLUMBING
        }
        digests[WORKING_DIRECTORY] = self._digest(WORKING_DIRECTORY, cwd)
        digests[INSTALLED_TEAMCTL] = self._digest(INSTALLED_TEAMCTL, installed_teamctl())
        return digests

    def _digest(self, name: str, value: str) -> str:
        message = f"{name}={value}".encode(errors="surrogateescape")
        return hmac.new(self.salt, message, hashlib.sha256).hexdigest()[:16]


def differences(
    now: Mapping[str, str], recorded: Mapping[str, str], names: Iterable[str]
) -> list[str]:
    """Which of `names` differ between two digest maps (one set, the other not, counts)."""
    return sorted(name for name in names if now.get(name) != recorded.get(name))


def load_salt(path: Path) -> bytes:
    """The pool's salt, made on first use (0600, in the pool's 0700 dir)."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        salt = secrets.token_bytes(SALT_BYTES)
        write_private(path, salt.hex() + "\n")
        return salt


def installed_teamctl() -> str:
    """The interpreter, teamctl's package directories and the newest change to their files: a
    worker started before an upgrade or an edit runs other code."""
    from importlib.util import find_spec

    roots = []
    for name in ("teamctl", "teamctl.coordinator", "teamctl.worker", "teamctl.shared"):
        spec = find_spec(name)
        roots += list(spec.submodule_search_locations or []) if spec else []
    newest = max((_newest_mtime_ns(Path(root)) for root in roots), default=0)
    return f"{sys.executable}|{'|'.join(roots)}|{newest}"


def _newest_mtime_ns(root: Path) -> int:
    """The latest modification time of a package's files (~150 stats, ~1 ms)."""
    newest = 0
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        for name in files:
            if name.endswith((".py", ".lua", ".md")):
                try:
                    newest = max(newest, os.stat(os.path.join(directory, name)).st_mtime_ns)
                except FileNotFoundError:  # removed while we walked: the next run sees it
                    continue
    return newest
