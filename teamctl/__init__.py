"""teamctl: a distributed runtime for teams of LLM agents on Redis and RQ.

The installed packages are `teamctl.coordinator`, `teamctl.worker` and `teamctl.shared`. The
public Python API will be exported here, with `__all__`; everything else is internal.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
