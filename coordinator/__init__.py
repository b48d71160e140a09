"""The processes a person drives: the CLI (`cli/`), a planned run's coordinator (`runs/`), a
persistent team's lead (`teams/`), and the workers a command starts on this host
(`local_workers/`)."""
