"""What a planned run keeps in Redis: its configuration (team file, options, RunSpec), its store
and handle, its members' transcripts, and its expiry."""
