"""RQ settings module that preloads litellm once per worker process.

Start workers with `RQ_CONFIG=teamctl.worker.settings rq worker members` (RQ reads RQ_CONFIG as
it reads `-c teamctl.worker.settings`). RQ's forking worker
imports job modules inside every forked child; importing litellm here, in the parent, means each
child inherits it instead of paying a ~3 s import per task. The warm-up also moves litellm's lazy
first-call work (~400 ms, its success path included) into the parent, and the prompt templates,
tool schemas and Lua sources are prepared here once, and the MCP SDK's client is imported
(its sessions are per attempt: see shared/agent/mcp_tools.py). An experimental worker class,
`-w teamctl.worker.warm_fork.WarmForkWorker`, also forks each job's process ahead (warm_fork.py).
A worker started by `teamctl run` also stops when that run is gone (shared/parent_watch.py).
"""

import gc
import os

import teamctl.worker.jobs
import teamctl.worker.turn  # noqa: F401  (turn jobs import it in every fork otherwise)
from teamctl.shared.agent.llm import load_litellm, warm_up
from teamctl.shared.agent.mcp_tools import preload_sdk
from teamctl.shared.agent.prompts import precompile
from teamctl.shared.agent.tools import precompute_schemas
from teamctl.shared.parent_watch import watch_parent
from teamctl.shared.scripts import sources
from teamctl.shared.settings import load_settings

QUEUES = ["members"]
"""RQ's default queues for a worker started with this module and no queue names."""
REDIS_URL = os.environ.get("REDIS_URL")
"""RQ's Redis when neither -u nor $RQ_REDIS_URL is given: the one teamctl itself uses."""

os.environ[teamctl.worker.jobs.PRELOAD_MARKER] = "1"  # forked jobs see it: no "not preloaded" hint
warm_up(load_litellm())
preload_sdk()  # the MCP client (~0.8 s an import), for members with MCP servers
precompile("teamctl.worker")
precompute_schemas()  # the tools' JSON schemas, sent with every model call
sources()  # the Lua scripts' text, read from the package once
load_settings()  # pydantic-settings' first build (~3 ms); each job still reads its environment
watch_parent(os.environ)
# Everything above lives as long as the worker: frozen, the collector of each forked job never
# walks these objects (it would write their gc headers and copy their pages into the job).
gc.freeze()
