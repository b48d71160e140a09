"""RQ settings module that preloads litellm once per worker process.

Start workers with `rq worker -c worker.settings members -u REDIS_URL`. RQ's forking worker
imports job modules inside every forked child; importing litellm here, in the parent, means each
child inherits it instead of paying a ~3 s import per task. The warm-up also moves litellm's lazy
first-call work (~400 ms) into the parent.
"""

import os

os.environ["TEAMCTL_PRELOADED"] = "1"
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from shared.llm import load_litellm, warm_up  # noqa: E402  (the env must be set first)

warm_up(load_litellm())

import worker.jobs  # noqa: E402,F401  (preload the job module and its imports too)
from shared.prompts import precompile  # noqa: E402

precompile("worker")  # forked jobs inherit the compiled prompt templates
