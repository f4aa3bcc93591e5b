-- The escalation queue and its outbox on Redis (escalations/redis.py): each write changes the
-- records and appends its outbox message to one stream in the same script, so both happen or
-- neither. Redis does not roll a script back: every check that can fail runs before the first
-- write, and the writes that remain cannot fail on keys of the right types.
--
-- Every key shares the hash tag `{esc}` of its prefix (one slot on Redis Cluster), so a key a
-- script builds from ARGV[2] (the keys' common head) is in the slot of the KEYS it was given.
-- Records: a hash per escalation (status, record: its JSON, member: "<seq>:<id>", the member
-- of the sorted sets, whose zero-padded insertion number orders equal created_at scores;
-- collapsed: how many sessions were collapsed onto it), handed out as {record JSON, collapsed}.
-- A session collapsed onto an escalation past its tenant's cap is in the set c:<id>, and the
-- escalation's member in the session's sorted set collapsed:<session> (what frozen reads).
--
-- ARGV[1] op, then per op:
-- escalate  KEYS outbox, e:<id>, key:<key>, open:<session>, list:all, list:open, seq,
--           tenant:<tenant>:all, tenant:<tenant>:open, resolved, collapsed:<session>
--           ARGV head, id, record JSON, created_at, idempotency key, message JSON, now,
--           the tenant's key part, the session's (tenant and session) key part, prune before,
--           the tenant's cap of open escalations, the cap alert's idempotency key and its JSON,
--           each but for the escalation id (appended here, and the JSON's closing `"}`)
--           -> nil (opened), or the escalation already open for the key, or the one the session
--           is collapsed onto (the tenant at its cap: its newest open one; the first collapse
--           onto it puts the alert on the outbox)
-- resolve   KEYS outbox, e:<id>, key:<key>, open:<session>, aborted:<session>, list:open,
--           list:<status>, tenant:<tenant>:open, tenant:<tenant>:<status>, resolved
--           ARGV id, new status, record JSON, created_at, idempotency key, message JSON, now,
--           head, prune before
--           -> the status before: "open" (resolved now), another (resolved before), "" (unknown)
-- incident  KEYS outbox, seen:<idempotency key>
--           ARGV idempotency key, message JSON, now, seconds the key is remembered -> 1 added, 0 seen
-- frozen    KEYS open:<session>, aborted:<session>, collapsed:<session>; ARGV head -> a record or nil
-- list      KEYS list:<all or status>, or tenant:<tenant>:<all or status>; ARGV head, limit
--           -> records, the newest first
--
-- `resolved` scores each resolved escalation's member by its resolution time: escalate and
-- resolve delete a batch of those resolved before the cutoff (retention), record and members,
-- and the sessions collapsed onto them, PRUNE_COLLAPSED at most a write (the record waits for
-- the next write while some are left).
-- pending   KEYS outbox; ARGV group, consumer, limit, idle ms after which another relay's
--           entries are taken over -> {entries, {id, times delivered, ...}}
-- count     KEYS outbox; ARGV group -> entries the group has not acknowledged
-- trim      KEYS outbox; ARGV group, before (ms), idle ms after which an empty consumer goes
--           -> entries trimmed

local op = ARGV[1]

local function expect(key, want)
  local found = redis.call("TYPE", key).ok
  if found ~= "none" and found ~= want then
    error({err = "WRONGTYPE " .. key .. " holds a " .. found .. ", not a " .. want})
  end
end

local function append(stream, key, kind, message, now)
  redis.call("XADD", stream, "*", "key", key, "kind", kind, "message", message, "created_at", now)
end

-- the sessions collapsed onto escalations past retention that one write forgets at most: a
-- flood's thousands go over a few writes, none holding Redis up for long
local PRUNE_COLLAPSED = 1000

local function record_by_id(head, id)
  local record, collapsed = unpack(redis.call("HMGET", head .. "e:" .. id, "record", "collapsed"))
  if not record then return nil end
  return {record, collapsed}
end

local function record_of(head, member)
  return record_by_id(head, string.sub(member, 18))
end

-- a stream id as two numbers, so ids compare as Redis orders them
local function parse_id(id)
  local ms, seq = string.match(id, "^(%d+)-(%d+)$")
  return tonumber(ms), tonumber(seq)
end

local function id_before(a, b)
  local ams, aseq = parse_id(a)
  local bms, bseq = parse_id(b)
  return ams < bms or (ams == bms and aseq < bseq)
end

-- XINFO's flat name/value lists as tables
local function fields(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

-- a consumer group's XINFO fields, or nil when there is no such group (or no stream)
local function group_of(stream, name)
  if redis.call("EXISTS", stream) == 0 then return nil end
  for _, flat in ipairs(redis.call("XINFO", "GROUPS", stream)) do
    local g = fields(flat)
    if g.name == name then return g end
  end
  return nil
end

-- delete up to 100 escalations resolved before `before`: their records, every set naming them,
-- and the sessions collapsed onto them (first, PRUNE_COLLAPSED at most)
local function prune(head, resolved, before)
  local budget = PRUNE_COLLAPSED
  for _, member in ipairs(redis.call("ZRANGEBYSCORE", resolved, "-inf", "(" .. before, "LIMIT", 0, 100)) do
    if budget == 0 then return end
    local sessions = head .. "c:" .. string.sub(member, 18)
    local whos = redis.call("SPOP", sessions, budget)
    for _, who in ipairs(whos) do redis.call("ZREM", head .. "collapsed:" .. who, member) end
    budget = budget - #whos
    if redis.call("EXISTS", sessions) == 1 then return end
    local record = head .. "e:" .. string.sub(member, 18)
    local status, tenant, who = unpack(redis.call("HMGET", record, "status", "tenant", "who"))
    redis.call("DEL", record)
    redis.call("ZREM", resolved, member)
    redis.call("ZREM", head .. "list:all", member)
    if status then redis.call("ZREM", head .. "list:" .. status, member) end
    if tenant then
      redis.call("ZREM", head .. "tenant:" .. tenant .. ":all", member)
      if status then redis.call("ZREM", head .. "tenant:" .. tenant .. ":" .. status, member) end
    end
    if who then redis.call("ZREM", head .. "aborted:" .. who, member) end
  end
end

if op == "escalate" then
  local head, id, record, created_at, key, message, now, tenant, who, before =
    ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
  local max_open, alert_key, alert = tonumber(ARGV[12]), ARGV[13], ARGV[14]
  local open = redis.call("GET", KEYS[3])
  if open then
    local existing = record_by_id(head, open)
    if existing then return existing end
  end
  -- a session collapsed onto an escalation still open is counted once
  for _, onto in ipairs(redis.call("ZRANGE", KEYS[11], 0, -1)) do
    if redis.call("HGET", head .. "e:" .. string.sub(onto, 18), "status") == "open" then return record_of(head, onto) end
  end
  if redis.call("EXISTS", KEYS[2]) == 1 then error({err = "EXISTS escalation " .. id .. " exists already"}) end
  expect(KEYS[1], "stream")
  expect(KEYS[3], "string")
  expect(KEYS[4], "zset")
  expect(KEYS[5], "zset")
  expect(KEYS[6], "zset")
  expect(KEYS[7], "string")
  for i = 8, 11 do expect(KEYS[i], "zset") end
  if redis.call("ZCARD", KEYS[9]) >= max_open then
    -- the tenant is at its cap: the session is frozen under its newest open escalation instead
    local onto, score = unpack(redis.call("ZREVRANGE", KEYS[9], 0, 0, "WITHSCORES"))
    local onto_id = string.sub(onto, 18)
    expect(head .. "c:" .. onto_id, "set")
    local collapsed = redis.call("HINCRBY", head .. "e:" .. onto_id, "collapsed", 1)
    redis.call("SADD", head .. "c:" .. onto_id, who)
    redis.call("ZADD", KEYS[11], score, onto)
    if collapsed == 1 then append(KEYS[1], alert_key .. onto_id, "incident", alert .. onto_id .. '"}', now) end
    return record_of(head, onto)
  end
  local member = string.format("%016d:%s", redis.call("INCR", KEYS[7]), id)
  append(KEYS[1], key, "escalation", message, now)
  redis.call("HSET", KEYS[2], "status", "open", "record", record, "member", member, "tenant", tenant, "who", who)
  redis.call("SET", KEYS[3], id)
  for i = 4, 6 do redis.call("ZADD", KEYS[i], created_at, member) end
  for i = 8, 9 do redis.call("ZADD", KEYS[i], created_at, member) end
  prune(head, KEYS[10], before)
  return nil

elseif op == "resolve" then
  local id, status, record, created_at, key, message, now, head, cutoff =
    ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
  local before = redis.call("HGET", KEYS[2], "status")
  if not before then return "" end
  if before ~= "open" then return before end
  expect(KEYS[1], "stream")
  expect(KEYS[3], "string")
  for i = 4, 10 do expect(KEYS[i], "zset") end
  local member = redis.call("HGET", KEYS[2], "member")
  append(KEYS[1], key, "resolution", message, now)
  redis.call("HSET", KEYS[2], "status", status, "record", record)
  if redis.call("GET", KEYS[3]) == id then redis.call("DEL", KEYS[3]) end
  redis.call("ZREM", KEYS[4], member)
  redis.call("ZREM", KEYS[6], member)
  redis.call("ZADD", KEYS[7], created_at, member)
  redis.call("ZREM", KEYS[8], member)
  redis.call("ZADD", KEYS[9], created_at, member)
  redis.call("ZADD", KEYS[10], now, member)
  if status == "aborted" then redis.call("ZADD", KEYS[5], created_at, member) end
  prune(head, KEYS[10], cutoff)
  return before

elseif op == "incident" then
  local key, message, now, remember_s = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
  if redis.call("EXISTS", KEYS[2]) == 1 then return 0 end
  expect(KEYS[1], "stream")
  append(KEYS[1], key, "incident", message, now)
  redis.call("SET", KEYS[2], "1", "EX", remember_s)
  return 1

elseif op == "frozen" then
  -- the oldest open escalation, else the latest aborted one; one the session was collapsed onto
  -- counts as its own
  local head, open, aborted = ARGV[2], {}, {}
  local function add(into, found)
    if found[1] then into[#into + 1] = {tonumber(found[2]), found[1]} end
  end
  add(open, redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES"))
  add(aborted, redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES"))
  local onto = redis.call("ZRANGE", KEYS[3], 0, -1, "WITHSCORES")
  for i = 1, #onto, 2 do
    local status = redis.call("HGET", head .. "e:" .. string.sub(onto[i], 18), "status")
    if status == "open" then add(open, {onto[i], onto[i + 1]}) elseif status == "aborted" then add(aborted, {onto[i], onto[i + 1]}) end
  end
  -- by created_at, then by insertion (the member's zero-padded number)
  local function before(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end
  table.sort(open, before)
  table.sort(aborted, before)
  local chosen = open[1] or aborted[#aborted]
  if not chosen then return nil end
  return record_of(head, chosen[2])

elseif op == "list" then
  local out = {}
  for _, member in ipairs(redis.call("ZREVRANGE", KEYS[1], 0, tonumber(ARGV[3]) - 1)) do
    out[#out + 1] = record_of(ARGV[2], member)
  end
  return out

elseif op == "pending" then
  local group, consumer, limit, claim_idle_ms = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  if not group_of(KEYS[1], group) then
    redis.call("XGROUP", "CREATE", KEYS[1], group, "0", "MKSTREAM")  -- from the first entry: nothing is skipped
  end
  local out = {}
  local function take(entries)
    for _, entry in ipairs(entries) do
      if entry[2] then
        out[#out + 1] = entry
      else
        redis.call("XACK", KEYS[1], group, entry[1])  -- deleted from the stream by hand: nothing to deliver
      end
    end
  end
  -- first what this relay read before and has not delivered (a failed pass): oldest first, again
  local mine = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", limit, "STREAMS", KEYS[1], "0")
  if mine then take(mine[1][2]) end
  -- then what other relays hold past the idle time (killed, or stuck): taken over
  local cursor = "0-0"
  repeat
    if #out >= limit then break end
    local claimed = redis.call("XAUTOCLAIM", KEYS[1], group, consumer, claim_idle_ms, cursor, "COUNT", limit - #out)
    cursor = claimed[1]
    take(claimed[2])
  until cursor == "0-0"
  -- then new entries
  if #out < limit then
    local new = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", limit - #out, "STREAMS", KEYS[1], ">")
    if new then take(new[1][2]) end
  end
  local times = {}
  for _, p in ipairs(redis.call("XPENDING", KEYS[1], group, "-", "+", limit, consumer)) do
    times[#times + 1] = p[1]
    times[#times + 1] = p[4]
  end
  return {out, times}

elseif op == "count" then
  local g = group_of(KEYS[1], ARGV[2])
  if not g then return redis.call("XLEN", KEYS[1]) end  -- no relay read it yet
  local lag = g.lag
  if not lag then  -- Redis cannot tell after entries were deleted mid-stream: count them
    lag = #redis.call("XRANGE", KEYS[1], "(" .. g["last-delivered-id"], "+")
  end
  return g.pending + lag

elseif op == "trim" then
  local group, before, idle_ms = ARGV[2], ARGV[3] .. "-0", tonumber(ARGV[4])
  if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
  local groups = redis.call("XINFO", "GROUPS", KEYS[1])
  if #groups == 0 then return 0 end  -- nobody reads it yet: nothing is known delivered
  -- below the oldest entry any group has not acknowledged, whoever reads the stream
  local keep, ours = before, false
  for _, flat in ipairs(groups) do
    local g = fields(flat)
    ours = ours or g.name == group
    local first
    if g.pending > 0 then
      first = redis.call("XPENDING", KEYS[1], g.name)[2]
    else
      local ms, seq = parse_id(g["last-delivered-id"])
      first = string.format("%.0f-%.0f", ms, seq + 1)
    end
    if id_before(first, keep) then keep = first end
  end
  local trimmed = redis.call("XTRIM", KEYS[1], "MINID", keep)
  -- consumers holding nothing and silent for long: relays that are gone (a live one is
  -- made again by its next read)
  if ours then
    for _, flat in ipairs(redis.call("XINFO", "CONSUMERS", KEYS[1], group)) do
      local c = fields(flat)
      if c.pending == 0 and c.idle > idle_ms then redis.call("XGROUP", "DELCONSUMER", KEYS[1], group, c.name) end
    end
  end
  return trimmed
end

return redis.error_reply("unknown op " .. tostring(op))
