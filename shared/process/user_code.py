"""Importing code a person named (a Python tool, a hook) the way its workers will import it."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def import_user_module(name: str) -> Any:
    """Import a module a person named (a tool's, a hook's) as an `rq worker` would: with the
    working directory on sys.path (RQ appends it), so what imports on a worker started in a
    project directory imports in a `teamctl` started there too."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path and "." not in sys.path:
        sys.path.append(here)
    return importlib.import_module(name)


def where_imports_come_from() -> str:
    """Where this process imports from, for an import error a person must fix."""
    path = os.environ.get("PYTHONPATH")
    return f"the working directory {os.getcwd()}" + (f" and PYTHONPATH={path}" if path else "")
