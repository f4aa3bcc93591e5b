-- One tool circuit breaker decision, atomically, in one round trip.
-- Mirrors agent_breaker/breaker/core.py (acquire / record / force); the contract tests run
-- both and compare. State is one JSON value per breaker key; a transition is published on
-- ARGV[6] so workers' near-caches learn it without a round trip per call.
--
-- KEYS[1]  the breaker's state key (hash-tagged by breaker)
-- KEYS[2]  optional (an outcome replayed after an outage): a marker set with the write, so a
--          retry whose first reply was lost can tell that the outcome was taken
-- ARGV[1]  op: "acquire" | "record" | "release" | "force" | "get"
-- ARGV[2]  now (seconds)
-- ARGV[3]  config (JSON)
-- ARGV[4]  op arguments (JSON): record {failed, slow, probe, session}; release {probe}; force {state}
-- ARGV[5]  key TTL in seconds
-- ARGV[6]  pub/sub channel for transitions
-- ARGV[7]  jitter draw in [-1, 1] (the script stays deterministic)

local op = ARGV[1]
local now = tonumber(ARGV[2])
local cfg = cjson.decode(ARGV[3])
local args = cjson.decode(ARGV[4])
local ttl = tonumber(ARGV[5])
local channel = ARGV[6]
local jitter_draw = tonumber(ARGV[7])

-- the legal moves: written in when the script is registered, from breaker/states.py TRANSITIONS
local LEGAL = __TRANSITIONS__
local STATES = __STATES__

local raw = redis.call("GET", KEYS[1])
local st
if raw then
  -- a value that does not decode to a breaker of a known state is refused, never replaced:
  -- it may hold an operator's forced_open
  local ok, decoded = pcall(cjson.decode, raw)
  local valid = ok and type(decoded) == "table" and STATES[decoded.state] and type(decoded.probes) == "table"
    and (decoded.window == nil or decoded.window == cjson.null
      or (type(decoded.window) == "table" and type(decoded.window.buckets) == "table" and type(decoded.window.totals) == "table"))
  if valid and decoded.failing ~= nil and type(decoded.failing) ~= "table" then valid = false end
  if valid then
    for _, field in ipairs({"opened_at", "open_interval_s", "next_probe", "probe_successes", "consecutive_failures", "changed_at"}) do
      if type(decoded[field]) ~= "number" then valid = false end
    end
  end
  if not valid then
    return redis.error_reply("CORRUPT")
  end
  st = decoded
  if st.failing == nil then st.failing = {} end  -- a breaker stored before sessions were told apart
else
  st = {state = "closed", window = cjson.null, opened_at = 0, open_interval_s = 0, probes = {},
        next_probe = 0, probe_successes = 0, consecutive_failures = 0, changed_at = 0, failing = {}}
end

local transition = nil

-- reasons are worded exactly as breaker/core.py words them
local function g(x) return string.format("%g", x) end

local function move(dst, reason)
  if not LEGAL[st.state .. ">" .. dst] then
    return redis.error_reply("ILLEGAL " .. st.state .. " " .. dst)
  end
  transition = {src = st.state, dst = dst, at = string.format("%.17g", now), reason = reason}
  st.state = dst
  st.changed_at = now
  return nil
end

-- the sliding window: buckets {index, calls, failed, slow, failed_or_slow}, running totals
local function ensure_window()
  local w = st.window
  if w == nil or w == cjson.null or w.window_s ~= cfg.window_s or w.bucket_s ~= cfg.bucket_s then
    st.window = {window_s = cfg.window_s, bucket_s = cfg.bucket_s, buckets = {}, totals = {0, 0, 0, 0}, evicted_at = -4611686018427387904}
  end
  return st.window
end

local function evict(w)
  local index = math.floor(now / w.bucket_s)
  if index == w.evicted_at then return index end
  w.evicted_at = index
  local oldest = index - math.floor(w.window_s / w.bucket_s) + 1
  local kept = {}
  for _, b in ipairs(w.buckets) do
    if b[1] < oldest then
      for i = 1, 4 do w.totals[i] = w.totals[i] - b[i + 1] end
    else
      table.insert(kept, b)
    end
  end
  w.buckets = kept
  if #kept == 0 then w.totals = {0, 0, 0, 0} end
  return index
end

local function window_add(calls, failed, slow, bad)
  local w = ensure_window()
  local index = evict(w)
  local last = w.buckets[#w.buckets]
  local bucket
  if last ~= nil and last[1] >= index then
    bucket = last
  else
    bucket = {index, 0, 0, 0, 0}
    table.insert(w.buckets, bucket)
  end
  local values = {calls, failed, slow, bad}
  for i = 1, 4 do
    bucket[i + 1] = bucket[i + 1] + values[i]
    w.totals[i] = w.totals[i] + values[i]
  end
end

local function threshold_met()
  if cfg.consecutive_failures ~= cjson.null and st.consecutive_failures >= cfg.consecutive_failures then
    return g(st.consecutive_failures) .. " failures in a row (threshold " .. g(cfg.consecutive_failures) .. ")"
  end
  local w = ensure_window()
  evict(w)
  local calls, failures, bad_any = w.totals[1], w.totals[2], w.totals[4]
  local bad = failures
  if cfg.slow_calls_are_failures then bad = bad_any end
  if cfg.failure_threshold ~= cjson.null and bad >= cfg.failure_threshold then
    return g(bad) .. " failures in " .. g(cfg.window_s) .. "s (threshold " .. g(cfg.failure_threshold) .. ")"
  end
  if cfg.failure_rate_pct ~= cjson.null and calls >= cfg.min_calls and bad * 100.0 >= cfg.failure_rate_pct * calls then
    return "failure rate " .. string.format("%.0f", bad * 100.0 / calls) .. "% over " .. g(calls)
      .. " calls (threshold " .. g(cfg.failure_rate_pct) .. "%)"
  end
  return nil
end

-- a breaker told which sessions failed (`shared`) needs enough of them in the window
local function should_trip(shared)
  local reason = threshold_met()
  if reason == nil or not shared then return reason end
  local since, sessions = now - cfg.window_s, 0
  for _, f in ipairs(st.failing) do
    if f[2] > since then sessions = sessions + 1 end
  end
  if sessions >= cfg.min_sessions then return reason end
  return nil
end

-- remember `session` among the latest failing ones (as many as min_sessions asks for)
local function note_failing(session)
  local others = {}
  for _, f in ipairs(st.failing) do
    if f[1] ~= session and f[2] > now - cfg.window_s then table.insert(others, f) end
  end
  local kept = {}
  for i = math.max(1, #others - cfg.min_sessions + 2), #others do table.insert(kept, others[i]) end
  table.insert(kept, {session, now})
  st.failing = kept
end

local function reset()
  ensure_window()
  st.window.buckets = {}
  st.window.totals = {0, 0, 0, 0}
  st.open_interval_s = 0
  st.probes = {}
  st.probe_successes = 0
  st.consecutive_failures = 0
  st.failing = {}
end

local function open(interval, reason)
  if cfg.jitter_pct > 0 then
    local spread = interval * cfg.jitter_pct / 100.0
    interval = math.min(math.max(0.001, interval + spread * jitter_draw), cfg.max_open_s)
  end
  local err = move("open", reason)
  if err then return err end
  st.opened_at = now
  st.open_interval_s = interval
  st.probes = {}
  st.probe_successes = 0
  transition.open_interval_s = string.format("%.17g", interval)
  return nil
end

-- cjson writes numbers with 14 significant digits; times need 17 to round-trip exactly
local function num(x) return string.format("%.17g", x) end
local function nums(list)
  local out = {}
  for i, x in ipairs(list) do out[i] = num(x) end
  return "[" .. table.concat(out, ",") .. "]"
end
local function lists(list)
  local out = {}
  for i, x in ipairs(list) do out[i] = nums(x) end
  return "[" .. table.concat(out, ",") .. "]"
end
local function failing_list()
  local out = {}
  for i, f in ipairs(st.failing) do out[i] = "[" .. cjson.encode(f[1]) .. "," .. num(f[2]) .. "]" end
  return "[" .. table.concat(out, ",") .. "]"
end
local function encode_state()
  local w = "null"
  if st.window ~= nil and st.window ~= cjson.null then
    local win = st.window
    w = '{"window_s":' .. num(win.window_s) .. ',"bucket_s":' .. num(win.bucket_s) .. ',"buckets":' .. lists(win.buckets)
      .. ',"totals":' .. nums(win.totals) .. ',"evicted_at":' .. num(win.evicted_at) .. '}'
  end
  return '{"state":' .. cjson.encode(st.state) .. ',"window":' .. w .. ',"opened_at":' .. num(st.opened_at)
    .. ',"open_interval_s":' .. num(st.open_interval_s) .. ',"probes":' .. lists(st.probes)
    .. ',"next_probe":' .. num(st.next_probe) .. ',"probe_successes":' .. num(st.probe_successes)
    .. ',"consecutive_failures":' .. num(st.consecutive_failures) .. ',"changed_at":' .. num(st.changed_at) .. ',"failing":' .. failing_list() .. '}'
end

local result = {}

if op == "acquire" then
  local state = st.state
  if state == "closed" or state == "disabled" then
    result = {allowed = true, state = state}
  elseif state == "metrics_only" then
    result = {allowed = true, state = state, would_refuse = should_trip(#st.failing > 0) ~= nil}
  elseif state == "forced_open" then
    result = {allowed = false, state = state}
  else
    local proceed = true
    if state == "open" then
      local reopen_at = st.opened_at + st.open_interval_s
      if now < reopen_at then
        result = {allowed = false, state = state, retry_after_s = reopen_at - now}
        proceed = false
      else
        local err = move("half_open", "open interval of " .. g(st.open_interval_s) .. "s elapsed")
        if err then return err end
        st.probes = {}
        st.probe_successes = 0
      end
    end
    if proceed then
      local live = {}
      for _, p in ipairs(st.probes) do
        if now - p[2] < cfg.probe_timeout_s then table.insert(live, p) end
      end
      st.probes = live
      if #st.probes + st.probe_successes < cfg.half_open_probes then
        local probe = st.next_probe
        st.next_probe = st.next_probe + 1
        table.insert(st.probes, {probe, now})
        result = {allowed = true, state = "half_open", probe = probe}
      else
        local oldest = now
        for _, p in ipairs(st.probes) do if p[2] < oldest then oldest = p[2] end end
        result = {allowed = false, state = "half_open", retry_after_s = math.max(0, oldest + cfg.probe_timeout_s - now)}
      end
    end
  end
elseif op == "record" then
  local state = st.state
  local failed, slow, probe = args.failed, args.slow, args.probe
  if state == "half_open" then
    local slot = nil
    if probe ~= nil and probe ~= cjson.null then
      for i, p in ipairs(st.probes) do
        if p[1] == probe then slot = i break end
      end
    end
    if slot ~= nil then
      table.remove(st.probes, slot)
      if failed or (slow and cfg.slow_calls_are_failures) then
        local interval = math.min(math.max(st.open_interval_s, cfg.open_s) * cfg.backoff_multiplier, cfg.max_open_s)
        local err = open(interval, "a half-open probe failed")
        if err then return err end
      else
        st.probe_successes = st.probe_successes + 1
        if st.probe_successes >= cfg.half_open_probes then
          reset()
          local err = move("closed", g(cfg.half_open_probes) .. " half-open probes succeeded")
          if err then return err end
        end
      end
    end
  elseif state == "closed" or state == "metrics_only" then
    local bad = failed or (slow and cfg.slow_calls_are_failures)
    if bad then st.consecutive_failures = st.consecutive_failures + 1 else st.consecutive_failures = 0 end
    local f, s, b = 0, 0, 0
    if failed then f = 1 end
    if slow then s = 1 end
    if failed or slow then b = 1 end
    window_add(1, f, s, b)
    local shared = args.session ~= nil and args.session ~= cjson.null
    if bad and shared then note_failing(args.session) end
    if state == "closed" then
      local reason = should_trip(shared)
      if reason ~= nil then
        local err = open(cfg.open_s, reason)
        if err then return err end
      end
    end
  end
  result = {state = st.state}
elseif op == "release" then
  -- a probe admitted for a call that was refused for another reason: its slot is free again
  for i, p in ipairs(st.probes) do
    if p[1] == args.probe then table.remove(st.probes, i) break end
  end
  result = {state = st.state}
elseif op == "force" then
  local dst = args.state
  if dst == "closed" and st.state == "closed" then
    reset()
  elseif dst == st.state then
    -- already there: an operator repeating a command moves nothing
  else
    local err = move(dst, "operator")
    if err then return err end
    if dst == "closed" then reset() end
  end
  result = {state = st.state}
else
  result = {state = st.state}
end

local encoded = encode_state()
if op ~= "get" then
  redis.call("SET", KEYS[1], encoded, "EX", ttl)
  if KEYS[2] then redis.call("SET", KEYS[2], "1", "EX", ttl) end
end
if transition ~= nil then
  result.transition = transition
  local until_s = 0
  if st.state == "open" then until_s = st.opened_at + st.open_interval_s end
  redis.call("PUBLISH", channel, '{"key":' .. cjson.encode(KEYS[1]) .. ',"state":' .. cjson.encode(st.state) .. ',"until_s":' .. num(until_s) .. '}')
end
if result.retry_after_s ~= nil then result.retry_after_s = num(result.retry_after_s) end
result.raw = encoded
return cjson.encode(result)
