-- Add one step's spend to a tenant's and feature's fixed window, shared by every worker.
-- KEYS[1] the window's key; ARGV[1] tokens; ARGV[2] cost in USD; ARGV[3] TTL seconds.
-- Returns the window's totals {tokens, cost} as strings (exact decimal floats).
local tokens = redis.call("HINCRBYFLOAT", KEYS[1], "tokens", ARGV[1])
local cost = redis.call("HINCRBYFLOAT", KEYS[1], "cost_usd", ARGV[2])
redis.call("EXPIRE", KEYS[1], tonumber(ARGV[3]))
return {tokens, cost}
