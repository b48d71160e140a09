-- mcp_cache_remember: keep the first tool list of an MCP server a worker listed for a run, with
-- the run's TTL once it ended, so a list written after expire_run does not outlive the run.
-- KEYS[1] the run's mcp_tools hash, KEYS[2] the run's spec key (whose TTL it takes).
-- ARGV[1] server name, ARGV[2] its tools (JSON list).
-- Returns 'ok' (kept) or 'taken' (another worker's list was there first).
-- uses: core
-- access: write
-- KEYS: tools_key, spec_key
-- ARGV: server, tools
local tools_key, spec_key = KEYS[1], KEYS[2]
local server, tools = ARGV[1], ARGV[2]
if redis.call('HSETNX', tools_key, server, tools) == 0 then return 'taken' end
inherit_ttl(tools_key, spec_key)
return 'ok'
