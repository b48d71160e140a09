"""What every process shares: settings, models, keys, Lua, board, bus, run handle, agent parts."""
