-- Add one step's spend to a tenant's and feature's fixed window, shared by every worker.
-- KEYS[1] the window's key; ARGV[1] tokens; ARGV[2] cost in USD; ARGV[3] TTL seconds.
-- KEYS[2] (optional, write-back after an outage): a marker set with the addition (see session_cas.lua).
-- Returns the window's totals {tokens, cost} as strings (exact decimal floats).
local tokens = redis.call("HINCRBYFLOAT", KEYS[1], "tokens", ARGV[1])
local cost = redis.call("HINCRBYFLOAT", KEYS[1], "cost_usd", ARGV[2])
redis.call("EXPIRE", KEYS[1], tonumber(ARGV[3]))
if KEYS[2] then redis.call("SET", KEYS[2], "1", "EX", tonumber(ARGV[3])) end
return {tokens, cost}
