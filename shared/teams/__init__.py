"""What a persistent team keeps in Redis: its store (lifecycle, messages, requests, turns and their
scheduling), its teammates' records, its task board and the lead's inbox."""
