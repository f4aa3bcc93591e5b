-- Compare-and-set of one session's state: write ARGV[2] only if the stored version is ARGV[1].
-- The encoding (store/codec.py) starts "[FORMAT,VERSION,"; an absent key, a value of another
-- format or an unreadable one is version 0 (the reader treated it as absent).
-- KEYS[1] the session key; ARGV[1] expected version; ARGV[2] new state; ARGV[3] TTL seconds;
-- ARGV[4] the encoding's FORMAT. KEYS[2] (optional, write-back after an outage): a marker set
-- with the write, so a retry whose first reply was lost can tell that the write happened.
local current = redis.call("GET", KEYS[1])
local version = 0
if current then
  local format, stored = string.match(current, "^%[(%d+),(%d+),")
  if format == ARGV[4] and stored then version = tonumber(stored) end
end
if version ~= tonumber(ARGV[1]) then
  return 0
end
redis.call("SET", KEYS[1], ARGV[2], "EX", tonumber(ARGV[3]))
if KEYS[2] then redis.call("SET", KEYS[2], "1", "EX", tonumber(ARGV[3])) end
return 1
