"""The lead agent of a persistent team (`teamctl lead`): its agent loop and memory (lead.py), its
tools (lead_tools.py) and the terminal loop with its slash commands (repl.py)."""
