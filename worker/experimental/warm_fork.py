"""The warm-fork worker's name while it was opt-in, so `-w
teamctl.worker.experimental.warm_fork.WarmForkWorker` still starts a worker: it is teamctl's
default worker now (worker/warm_fork.py)."""

from teamctl.worker.warm_fork import WarmForkWorker

__all__ = ["WarmForkWorker"]
