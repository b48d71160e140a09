"""The workers a command starts on this host: a run's own group (`processes`), the warm pool later
runs reuse (`pool`), how the pool tells one environment from another (`job_env`), and the hints
printed when a queue has no worker (`worker_hints`)."""
