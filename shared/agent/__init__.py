"""One agent's parts, usable in any process: model client, agent loop, tools, prompts."""
