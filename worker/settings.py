"""RQ settings module that makes an `rq worker` a complete teamctl worker, and preloads it.

`RQ_CONFIG=teamctl.worker.settings rq worker` (or `teamctl worker`) is all a worker needs: before
the preload, this module gives RQ teamctl's worker and connection classes (worker/rq_bootstrap.py: a
Redis restart or failover is ridden out for redis_outage_s, then the worker exits) and the Redis
teamctl uses (REDIS_URL, else the embedded server of this user and TEAMCTL_STATE_DIR); with no queue
named it serves `members`. A worker started by a `teamctl run` that is already gone exits before its
preload, and one whose run goes later stops after its job (shared/process/parent_watch.py). Every
log record, RQ's own included, goes to stderr through one handler that makes the line printable
(shared/process/log_lines.py).

RQ's forking worker imports job modules inside every forked child; importing litellm here, in the
parent, means each child inherits it instead of paying a ~3 s import per task. The warm-up also
moves litellm's lazy first-call work (~400 ms, its success path included) into the parent, and the
prompt templates, tool schemas and Lua sources are prepared here once, and the MCP SDK's client is
imported (its sessions are per attempt: see shared/agent/mcp_tools.py); worker/preload.py lists
it all. A run's first worker that a fork server forked before its own preload was complete skips
the SDK, the turn job, litellm's error path and tiktoken's encoding, and keeps its priority,
until teamctl's worker class has handed its first job over: the planner's job waits on nothing
it does not use. Once preloaded, a worker lowers its CPU priority (worker/priority.py), so the
coordinator and Redis go first on a busy host. The default worker class, worker/warm_fork.py,
also forks each job's process ahead and warms it while no job waits.
"""

import gc
import os

from teamctl.shared.process.log_lines import WORKER_DATE_FORMAT, WORKER_FORMAT, log_to_stderr
from teamctl.shared.process.parent_watch import exit_if_parent_gone, watch_parent
from teamctl.shared.redis.connection import OutageTolerantRedis
from teamctl.shared.settings import load_settings
from teamctl.worker.preload import DEFERRED_ENV
from teamctl.worker.priority import lower_priority
from teamctl.worker.process_privacy import keep_environment_private
from teamctl.worker.rq_bootstrap import complete_rq_command, rq_redis_url

# First: RQ then adds no handler of its own (its records reach this one), and no record, RQ's,
# teamctl's or a library's, reaches stderr unprintable.
log_to_stderr(WORKER_FORMAT, WORKER_DATE_FORMAT)
# No collection during the preload: what it makes lives as long as the worker, and walking it
# again and again costs about a quarter of the preload; frozen at the end, then collected again.
gc.disable()
_deferred = os.environ.pop(DEFERRED_ENV, None) is not None  # a fork server's first run worker
exit_if_parent_gone(os.environ)  # before seconds of preload: a dead run's worker takes no job
complete_rq_command(os.environ)  # may start this command again, with teamctl's classes
keep_environment_private()  # before anything reads a secret; every work-horse inherits it

_settings = load_settings()
OutageTolerantRedis.outage_s = _settings.worker_outage_s  # before RQ connects with it
QUEUES = ["members"]
"""RQ's default queues for a worker started with this module and no queue names."""
REDIS_URL = rq_redis_url(_settings)
"""RQ's Redis when neither -u nor $RQ_REDIS_URL is given: the one teamctl itself uses."""

import teamctl.worker.jobs  # noqa: E402  (after the re-exec above: it imports litellm's helpers)
from teamctl.shared.tracing import check_tracing  # noqa: E402
from teamctl.worker.preload import preload_for_planning, preload_rest  # noqa: E402

os.environ[teamctl.worker.jobs.PRELOAD_MARKER] = "1"  # forked jobs see it: no "not preloaded" hint
preload_for_planning()  # a no-op in what a fork server forked: it ran there
if not _deferred:  # else teamctl's worker classes do it once they have handed a job over
    preload_rest()  # the turn job (imported in every fork otherwise), the MCP client
load_settings()  # the first Settings build (~3 ms); each job still reads its environment
if _settings.traces_wanted:  # the SDK's imports, once here; each job builds its own provider
    check_tracing(_settings)
    import teamctl.shared.tracing_otel  # noqa: E402, F401
exit_if_parent_gone(os.environ)  # the preload may have outlasted the run that started us
# After the preload, which a cold run's first model call waits for; a run's first worker keeps
# its priority until it has handed that job over (TeamctlWorker._finish_preload). Processes and
# threads started afterwards inherit it (the spares, the jobs); the few idle threads started
# before keep theirs.
if not _deferred:
    lower_priority(_settings.worker_nice)
watch_parent(os.environ)
# Everything above lives as long as the worker: frozen, the collector of each forked job never
# walks these objects (it would write their gc headers and copy their pages into the job).
gc.freeze()
gc.enable()
