-- mcp_listing_note: record what the planner's MCP listing job found for one server and wake
-- the coordinator waiting for it, with the run's TTL once it ended (a late job's note must not
-- outlive the run).
-- KEYS[1] the run's mcp_listing hash, KEYS[2] its mcp_listed wake-up list, KEYS[3] the run's
-- spec key (whose TTL they take).
-- ARGV[1] server name, ARGV[2] the outcome (JSON McpListing).
-- Returns 'ok'.
-- uses: core
-- access: write
-- KEYS: listing_key, listed_key, spec_key
-- ARGV: server, outcome
local listing_key, listed_key, spec_key = KEYS[1], KEYS[2], KEYS[3]
local server, outcome = ARGV[1], ARGV[2]
redis.call('HSET', listing_key, server, outcome)
redis.call('LPUSH', listed_key, server)
redis.call('LTRIM', listed_key, 0, 99)  -- a wake-up is only a nudge: the hash is the record
inherit_ttl(listing_key, spec_key)
inherit_ttl(listed_key, spec_key)
return 'ok'
