"""The waiting room's Lua scripts (rideout.waitingroom.store): each change of an event
is one atomic call. They live in the store layer with rideout's other Lua, as one
function library (:mod:`.functions`).

Every script takes the same ``KEYS``, one event's keys in the order of
:func:`rideout.store.keys.waitingroom_event_keys` (plus, for a few, one more key at the
end), and the same first two ``ARGV``: the caller's clock in milliseconds (the
store's injectable clock, so tests move time) and the events stream's approximate
bound. Errors a script raises itself start with ``rideout:``.

A request's record, in the ``requests`` hash, is ``q,entry_ms,state,iat,exp,status``:
its queue number, entry time, state (``prequeued``, ``waiting``, ``served``,
``expired``, ``abandoned``), and once served its token's ``iat``/``exp`` (seconds)
and session status (0 active, 1 completed, -1 abandoned).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ASSIGN",
    "CLAIM",
    "CREATE",
    "DELETE",
    "INCREMENT",
    "POSITION",
    "RELEASE_PREQUEUE",
    "RENEW",
    "RESET",
    "SESSION",
    "STATUS",
    "SWEEP",
    "UPDATE",
]

_COMMON: Final = r"""
local K = {event = KEYS[1], counters = KEYS[2], requests = KEYS[3], queue = KEYS[4],
           seen = KEYS[5], tokens = KEYS[6], active = KEYS[7], servable = KEYS[8],
           dead = KEYS[9], prequeue = KEYS[10], events = KEYS[11]}
local NOW = tonumber(ARGV[1])
local NOW_S = math.floor(NOW / 1000)
local MAXLEN = ARGV[2]

local function d(n) return string.format('%d', n) end

local function counter(name) return tonumber(redis.call('HGET', K.counters, name) or '0') end

local function bump(name, by) return redis.call('HINCRBY', K.counters, name, by) end

local function setting(name) return tonumber(redis.call('HGET', K.event, name) or '0') end

local function parse(rec)
  if not rec then return nil end
  local q, entry, state, iat, exp, status =
    string.match(rec, '^(%d+),(%d+),(%a+),(%d*),(%d*),(%-?%d*)$')
  if not q then
    return redis.error_reply('rideout: ' .. K.requests .. ' holds a malformed record')
  end
  return {q = tonumber(q), entry = tonumber(entry), state = state, iat = tonumber(iat),
          exp = tonumber(exp), status = tonumber(status)}
end

local function opt(n) if n == nil then return '' end return d(n) end

local function store(rid, r)
  redis.call('HSET', K.requests, rid, d(r.q) .. ',' .. d(r.entry) .. ',' .. r.state .. ',' ..
             opt(r.iat) .. ',' .. opt(r.exp) .. ',' .. opt(r.status))
end

local function emit(kind, detail)
  redis.call('XADD', K.events, 'MAXLEN', '~', MAXLEN, '*', 'type', kind, 'detail', detail,
             'time', d(NOW))
end

-- When position q became servable (ms): the first serving-counter move that reached it.
local function servable_at(q)
  local m = redis.call('ZRANGEBYSCORE', K.servable, q, '+inf', 'LIMIT', 0, 1)
  if #m == 0 then return nil end
  return tonumber(string.match(m[1], ':(%d+)$'))
end

local function set_serving(new)
  local old = counter('serving')
  if new == old then return end
  if new < old then
    -- The positions still under the counter keep when they became servable: the
    -- lowest move above `new` reached them, so its time stays, as a move to `new`.
    local above = redis.call('ZRANGEBYSCORE', K.servable, '(' .. d(new), '+inf', 'LIMIT', 0, 1)
    redis.call('ZREMRANGEBYSCORE', K.servable, '(' .. d(new), '+inf')
    if #above > 0 and new > 0 and redis.call('ZCOUNT', K.servable, new, new) == 0 then
      redis.call('ZADD', K.servable, new, d(new) .. ':' .. string.match(above[1], ':(%d+)$'))
    end
  else
    redis.call('ZADD', K.servable, new, d(new) .. ':' .. d(NOW))
  end
  redis.call('HSET', K.counters, 'serving', d(new))
end

-- Move the serving counter by `by`, never below its floor (the highest position that
-- took a token) nor below 0. Returns old, new.
local function increment(by)
  local old = counter('serving')
  local new = old + by
  local floor = counter('floor')
  if new < floor then new = floor end
  if new < 0 then new = 0 end
  set_serving(new)
  return old, new
end

-- Sessions holding capacity: active tokens, plus admitted positions that have not
-- taken theirs yet (neither served nor dead).
local function holding()
  local serving = counter('serving')
  local admitted = math.min(serving, counter('queue'))
  local dead = redis.call('ZCOUNT', K.dead, '-inf', serving)
  local pending = admitted - counter('tokens') - dead
  if pending < 0 then pending = 0 end
  return redis.call('ZCOUNT', K.active, NOW_S, '+inf') + pending
end

local function mark_dead(rid, r, state)
  r.state = state
  store(rid, r)
  bump(state, 1)
  redis.call('ZADD', K.dead, r.q, rid)
  redis.call('ZREM', K.seen, rid)
end

local function event_json(pairs_)
  local out = {}
  for i = 1, #pairs_, 2 do
    local v = pairs_[i + 1]
    if type(v) == 'number' then v = d(v) else v = cjson.encode(v) end
    table.insert(out, cjson.encode(pairs_[i]) .. ':' .. v)
  end
  return '{' .. table.concat(out, ',') .. '}'
end
"""

CREATE: Final = (
    _COMMON
    + r"""
-- ARGV[3] the event id, 4.. : field, value pairs of the settings hash (with the
-- event's first generation). The index of events is another slot's key: the store
-- adds the id to it around this script (RoomStore.create_event).
if redis.call('EXISTS', K.event) == 1 then return 'exists' end
redis.call('HSET', K.event, unpack(ARGV, 4))
return 'ok'
"""
)
"""Create an event (refused when it exists)."""

UPDATE: Final = (
    _COMMON
    + r"""
-- ARGV[3] the event id, 4.. : field, value pairs of the settings hash. Refused when
-- the event is gone. Turning abandonment on restarts every waiting position's clock
-- (polls do not touch it while abandonment is off; see SWEEP's resumed_at).
if redis.call('EXISTS', K.event) == 0 then return 'unknown' end
local was = setting('abandon_ms')
redis.call('HSET', K.event, unpack(ARGV, 4))
if was == 0 and setting('abandon_ms') > 0 then
  redis.call('HSET', K.counters, 'resumed_at', d(NOW))
end
return 'ok'
"""
)
"""Replace an existing event's settings."""

DELETE: Final = (
    _COMMON
    + r"""
-- ARGV[3] the event id (the store has taken it out of the index of events first).
if redis.call('EXISTS', K.event) == 0 then return 'unknown' end
redis.call('UNLINK', unpack(KEYS, 1, 11))  -- freed off the main thread
return 'ok'
"""
)
"""Delete an event and everything it holds."""

ASSIGN: Final = (
    _COMMON
    + r"""
-- ARGV[3] request id, ARGV[4] a random draw (pre-queue order).
-- Returns {kind, q, entry_ms, state}: kind 'new' | 'dup', or {'unknown'} | {'closed'}.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
local rid = ARGV[3]
local found = parse(redis.call('HGET', K.requests, rid))
if found then return {'dup', found.q, found.entry, found.state} end
if redis.call('HGET', K.event, 'open') ~= '1' then return {'closed'} end
-- Before the pre-queue closes: a random place. After it, while it is still being
-- numbered: behind every pre-queued arrival, in arrival order (draws are < 2^52).
local late = NOW >= setting('prequeue_ms') and redis.call('ZCARD', K.prequeue) > 0
if NOW < setting('prequeue_ms') or late then
  local draw = ARGV[4]
  if late then draw = d(4503599627370496 + NOW) end
  store(rid, {q = 0, entry = NOW, state = 'prequeued'})
  redis.call('ZADD', K.prequeue, draw, rid)
  bump('prequeued', 1)
  return {'new', 0, NOW, 'prequeued'}
end
local threshold = setting('threshold')
local admit = threshold > 0 and holding() < threshold
local q = bump('queue', 1)
store(rid, {q = q, entry = NOW, state = 'waiting'})
redis.call('ZADD', K.queue, q, rid)
redis.call('ZADD', K.seen, NOW, rid)
if admit and counter('serving') < q then set_serving(q) end
return {'new', q, NOW, 'waiting'}
"""
)
"""Give a request its position (once: the same request gets the same position)."""

RELEASE_PREQUEUE: Final = (
    _COMMON
    + r"""
-- ARGV[3] most to number in this call. Numbers pre-queued requests in their random
-- order once the pre-queue closed. Returns how many are still pre-queued.
if redis.call('EXISTS', K.event) == 0 then return -1 end
if NOW < setting('prequeue_ms') then return redis.call('ZCARD', K.prequeue) end
local batch = redis.call('ZRANGE', K.prequeue, 0, tonumber(ARGV[3]) - 1)
for _, rid in ipairs(batch) do
  local r = parse(redis.call('HGET', K.requests, rid))
  if r and r.state == 'prequeued' then
    r.q = bump('queue', 1)
    r.state = 'waiting'
    store(rid, r)
    redis.call('ZADD', K.queue, r.q, rid)
    redis.call('ZADD', K.seen, NOW, rid)
  end
  redis.call('ZREM', K.prequeue, rid)
  bump('prequeued', -1)
end
return redis.call('ZCARD', K.prequeue)
"""
)
"""Number the pre-queue in random order, in batches."""

POSITION: Final = (
    _COMMON
    + r"""
-- ARGV[3] request id, ARGV[4] '1' to count this as a poll (the abandonment clock).
-- Returns {'ok', q, entry_ms, state, serving, servable_ms|'', iat|'', exp|'', status|'',
-- max_expired} or {'unknown'} | {'noreq'}.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
local rid = ARGV[3]
local r = parse(redis.call('HGET', K.requests, rid))
if not r then return {'noreq'} end
if ARGV[4] == '1' and (r.state == 'waiting' or r.state == 'prequeued') then
  redis.call('ZADD', K.seen, 'XX', NOW, rid)
end
local since = ''
if r.q > 0 then since = opt(servable_at(r.q)) end
return {'ok', r.q, r.entry, r.state, counter('serving'), since, opt(r.iat), opt(r.exp),
        opt(r.status), counter('max_expired')}
"""
)
"""Read a request's position (and, on the writer, count the poll)."""

CLAIM: Final = (
    _COMMON
    + r"""
-- ARGV[3] request id, ARGV[4] validity in seconds ('' for the event's).
-- Returns {'new'|'dup', q, iat, exp}, {'ended', status}, {'expired', state},
-- {'notyet'}, {'unknown'} or {'noreq'}.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
local rid = ARGV[3]
local r = parse(redis.call('HGET', K.requests, rid))
if not r then return {'noreq'} end
if r.state == 'served' then
  if r.status ~= 0 then return {'ended', r.status} end
  return {'dup', r.q, r.iat, r.exp}
end
if r.state == 'expired' or r.state == 'abandoned' then return {'expired', r.state} end
if r.state == 'prequeued' or r.q > counter('serving') then return {'notyet'} end
local period = setting('expiry_ms')
if period > 0 then
  local since = servable_at(r.q) or r.entry
  if since < r.entry then since = r.entry end
  if r.q <= counter('max_expired') or NOW - since > period then
    mark_dead(rid, r, 'expired')
    return {'expired', 'expired'}
  end
end
local validity = tonumber(ARGV[4]) or setting('validity')
r.state, r.iat, r.exp, r.status = 'served', NOW_S, NOW_S + validity, 0
store(rid, r)
bump('tokens', 1)
if r.q > counter('floor') then redis.call('HSET', K.counters, 'floor', d(r.q)) end
redis.call('ZADD', K.tokens, r.exp, rid)
redis.call('ZADD', K.active, r.exp, rid)
redis.call('ZREM', K.seen, rid)
emit('token_generated', event_json({'event_id', redis.call('HGET', K.event, 'id'),
                                    'request_id', rid, 'queue_position', r.q}))
return {'new', r.q, r.iat, r.exp}
"""
)
"""Record a position's token claims once; later calls get the same claims."""

SESSION: Final = (
    _COMMON
    + r"""
-- ARGV[3] request id, ARGV[4] status (1 completed, -1 abandoned).
-- Returns 'ok', 'unknown', 'noreq' or 'conflict' (no token, or status already set).
if redis.call('EXISTS', K.event) == 0 then return 'unknown' end
local rid = ARGV[3]
local r = parse(redis.call('HGET', K.requests, rid))
if not r then return 'noreq' end
if r.state ~= 'served' or r.status ~= 0 then return 'conflict' end
r.status = tonumber(ARGV[4])
store(rid, r)
local name, count = 'completed', 'completed'
if r.status == -1 then name, count = 'abandoned', 'sessions_abandoned' end
bump(count, 1)
redis.call('ZREM', K.active, rid)
emit('session_updated', event_json({'event_id', redis.call('HGET', K.event, 'id'),
                                    'request_id', rid, 'status', name}))
return 'ok'
"""
)
"""End a session (only from 0), once."""

RENEW: Final = (
    _COMMON
    + r"""
-- KEYS[12] the session's rotation record "entry_ms:start_s:jti" (absent until the
-- first renewal). ARGV[3] request id, ARGV[4] the presented refresh token's jti ('' for
-- the first set's, which has none), ARGV[5] its iat, ARGV[6] its queue_position,
-- ARGV[7] the jti of the refresh token this renewal issues.
-- Returns {'ok', q, iat, exp, start}, {'reused'}, {'ended', status}, {'expired'},
-- {'capped'}, {'gone'} (no token for this request) or {'unknown'}.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
local rid = ARGV[3]
local r = parse(redis.call('HGET', K.requests, rid))
if not r or r.state ~= 'served' or r.q ~= tonumber(ARGV[6]) then return {'gone'} end
if r.status ~= 0 then return {'ended', r.status} end
if NOW >= r.exp * 1000 then return {'expired'} end
-- The refresh token a renewal takes: the latest renewal's (by jti), or before any, the
-- first set's (no jti, the record's iat). A record of an earlier position of the same
-- request id (before a reset) does not count.
local start, current = r.iat, ''
local rec = redis.call('GET', KEYS[12])
if rec then
  local entry, first, jti = string.match(rec, '^(%d+):(%d+):(.+)$')
  if entry and tonumber(entry) == r.entry then start, current = tonumber(first), jti end
end
if ARGV[4] ~= current or (current == '' and tonumber(ARGV[5]) ~= r.iat) then
  return {'reused'}
end
-- The session runs already to its cap: nothing to renew.
local cap = setting('max_session')
if cap > 0 and start + cap <= r.exp then return {'capped'} end
local exp = NOW_S + setting('validity')
if cap > 0 and exp > start + cap then exp = start + cap end
if exp < r.exp then exp = r.exp end -- a renewal never shortens a session
r.iat, r.exp = NOW_S, exp
store(rid, r)
redis.call('ZADD', K.tokens, r.exp, rid)
redis.call('ZADD', K.active, r.exp, rid)
-- Kept an hour past the session's end: a renewal needs an unexpired session, so the
-- record is there whenever one can happen.
redis.call('SET', KEYS[12], d(r.entry) .. ':' .. d(start) .. ':' .. ARGV[7],
           'PX', d(r.exp * 1000 - NOW + 3600000))
emit('session_renewed', event_json({'event_id', redis.call('HGET', K.event, 'id'),
                                    'request_id', rid, 'queue_position', r.q,
                                    'expires_at', r.exp}))
return {'ok', r.q, r.iat, r.exp, start}
"""
)
"""Renew an active session (a refresh token's grant): a new ``exp``, the refresh token
rotated."""

INCREMENT: Final = (
    _COMMON
    + r"""
-- ARGV[3] 'by', 'admit' or 'max_size', ARGV[4] n, ARGV[5] optional tick key's TTL
-- (ms): KEYS[12] then is the tick's claim, taken with SET NX (-1 when another process
-- holds it: nothing moves). Returns {old, new} of the serving counter, or {'unknown'}.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
if KEYS[12] then
  if not redis.call('SET', KEYS[12], '1', 'NX', 'PX', ARGV[5]) then return {'claimed'} end
end
local by = tonumber(ARGV[4])
if ARGV[3] == 'max_size' then by = by - holding() end
if ARGV[3] ~= 'by' then
  -- An inlet (model.queue_cap): never negative, never past the queue (an idle room's
  -- counter must not run ahead of its arrivals, or the next burst would find itself
  -- admitted all at once).
  by = math.min(by, counter('queue') - counter('serving'))
  if by < 0 then by = 0 end
end
local old, new = increment(by)
return {old, new}
"""
)
"""Move the serving counter (an operator's increment or an inlet's tick)."""

SWEEP: Final = (
    _COMMON
    + r"""
-- ARGV[3] most positions to look at, ARGV[4] the longest pause between two sweeps
-- that is not an outage (ms), ARGV[5] the sweeping region. Marks expired and abandoned
-- positions, then, with incr_on_expiry, moves the serving counter past the dead ones
-- it reached. Returns {expired, abandoned, incremented}.
if redis.call('EXISTS', K.event) == 0 then return {-1, 0, 0} end
local batch = tonumber(ARGV[3])
-- Nobody is abandoned for the time the room could not be reached: a sweep that finds
-- the previous one longer ago than ARGV[4] (a store outage: no writer took a sweep or
-- a poll meanwhile), or made by another region (a failover: the visitors find the new
-- region only through DNS and their backoff, however soon it sweeps), restarts every
-- waiting position's abandonment clock.
local last = counter('swept_at')
local by = redis.call('HGET', K.counters, 'swept_by')
if (last > 0 and NOW - last > tonumber(ARGV[4])) or (by and by ~= ARGV[5]) then
  redis.call('HSET', K.counters, 'resumed_at', d(NOW))
end
redis.call('HSET', K.counters, 'swept_at', d(NOW), 'swept_by', ARGV[5])
local expired, abandoned, incremented = 0, 0, 0
local period = setting('expiry_ms')
if period > 0 then
  local cursor = counter('max_expired')
  local rids = redis.call('ZRANGEBYSCORE', K.queue, '(' .. d(cursor), counter('serving'),
                          'LIMIT', 0, batch)
  for _, rid in ipairs(rids) do
    local r = parse(redis.call('HGET', K.requests, rid))
    if not r then break end
    if r.state == 'waiting' then
      local since = servable_at(r.q) or r.entry
      if since < r.entry then since = r.entry end
      if NOW - since <= period then break end
      mark_dead(rid, r, 'expired')
      expired = expired + 1
    end
    cursor = r.q
  end
  redis.call('HSET', K.counters, 'max_expired', d(cursor))
end
local hold = setting('abandon_ms')
-- A process restarts a polling position's clock at most once per touch interval
-- (poll_cache.touch_interval), so a slack past the hold: model.abandon_slack, a tenth
-- of the hold, at most 30 s; a client polling at least every `hold` is never abandoned.
local slack = math.min(math.ceil(hold / 10), 30000)
if hold > 0 and NOW - counter('resumed_at') > hold + slack then
  local rids = redis.call('ZRANGEBYSCORE', K.seen, '-inf', '(' .. d(NOW - hold - slack),
                          'LIMIT', 0, batch)
  for _, rid in ipairs(rids) do
    local r = parse(redis.call('HGET', K.requests, rid))
    if r and r.state == 'waiting' then
      mark_dead(rid, r, 'abandoned')
      abandoned = abandoned + 1
    else
      redis.call('ZREM', K.seen, rid)
    end
  end
end
if setting('incr_on_expiry') == 1 then
  for _ = 1, 64 do
    local serving = counter('serving')
    local due = redis.call('ZCOUNT', K.dead, '-inf', serving) - counter('recycled')
    if due <= 0 then break end
    local old, new = increment(due)
    bump('recycled', due)
    incremented = incremented + (new - old)
    emit('automatic_serving_counter_incr', event_json({
      'event_id', redis.call('HGET', K.event, 'id'), 'previous_serving_counter_position', old,
      'increment_by', new - old, 'current_serving_counter_position', new}))
  end
end
return {expired, abandoned, incremented}
"""
)
"""Expire and abandon positions, and recycle their capacity (one batch)."""

STATUS: Final = (
    _COMMON
    + r"""
-- Returns {counters hash, active tokens, holding}, read at one moment.
if redis.call('EXISTS', K.event) == 0 then return {'unknown'} end
return {redis.call('HGETALL', K.counters), redis.call('ZCOUNT', K.active, NOW_S, '+inf'),
        holding()}
"""
)
"""Read an event's counters, active sessions and capacity held, together."""

RESET: Final = (
    _COMMON
    + r"""
-- Zero the event's counters and forget every position and token (the settings and the
-- events stream stay); ARGV[3] the event's new generation (what the processes' position
-- caches are keyed by). Returns 'ok' or 'unknown'.
if redis.call('EXISTS', K.event) == 0 then return 'unknown' end
redis.call('HSET', K.event, 'generation', ARGV[3])
redis.call('UNLINK', K.counters, K.requests, K.queue, K.seen, K.tokens, K.active,
           K.servable, K.dead, K.prequeue)  -- a large event's: freed off the main thread
emit('reset', event_json({'event_id', redis.call('HGET', K.event, 'id')}))
return 'ok'
"""
)
"""Put an event back to its initial state."""
