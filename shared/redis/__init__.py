"""Redis itself: connections and their outage policy, the embedded server, which server a command
uses, and the Lua scripts (`lua/`, one folder per concern)."""
