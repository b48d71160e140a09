"""RQ settings module that preloads litellm once per worker process.

Start workers with `rq worker -c teamctl.worker.settings members -u REDIS_URL`. RQ's forking worker
imports job modules inside every forked child; importing litellm here, in the parent, means each
child inherits it instead of paying a ~3 s import per task. The warm-up also moves litellm's lazy
first-call work (~400 ms) into the parent, and the prompt templates are compiled here once.
A worker started by `teamctl run` also stops when that run is gone (shared/parent_watch.py).
"""

import os

import teamctl.worker.jobs
from teamctl.shared.agent.llm import load_litellm, warm_up
from teamctl.shared.agent.prompts import precompile
from teamctl.shared.parent_watch import watch_parent

os.environ[teamctl.worker.jobs.PRELOAD_MARKER] = "1"  # forked jobs see it: no "not preloaded" hint
warm_up(load_litellm())
precompile("teamctl.worker")
watch_parent(os.environ)
