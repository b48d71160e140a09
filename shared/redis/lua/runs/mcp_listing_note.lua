-- mcp_listing_note: record what the planner's MCP listing job found for one server and wake
-- the coordinator waiting for it, with the run's TTL once it ended (a late job's note must not
-- outlive the run).
-- KEYS[1] the run's mcp_listing hash, KEYS[2] its mcp_listed wake-up list, KEYS[3] the run's
-- spec key (whose TTL they take).
-- ARGV[1] server name, ARGV[2] the outcome (JSON McpListing).
-- Returns 1.
-- uses: core
-- access: write
-- KEYS: listing_key, listed_key, spec_key
-- ARGV: server, outcome
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], 0, 99)  -- a wake-up is only a nudge: the hash is the record
inherit_ttl(KEYS[1], KEYS[3])
inherit_ttl(KEYS[2], KEYS[3])
return 1
