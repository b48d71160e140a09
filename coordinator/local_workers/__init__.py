"""The workers a command starts on this host: a run's own group (`processes`), the warm pool later
runs reuse (`pool`), and how the pool tells one environment from another (`job_env`)."""
