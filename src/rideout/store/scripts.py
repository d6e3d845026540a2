"""The Lua scripts that change (or consistently read) several keys at once.

Each script runs atomically on the Redis server, so a bid is one round trip and no
other client ever sees half of it. On Redis 7.0+ and Valkey they are the functions of
one library (:mod:`.functions`, called with ``FCALL``); on 6.2 they are called through
``EVALSHA`` (redis-py's ``Script`` object loads a script again when a server answers
``NOSCRIPT``, e.g. a replica promoted after a failover, or after ``SCRIPT FLUSH``).

Conventions shared by the scripts (Redis 6.2's Lua 5.1):

- Every key a script touches is passed in ``KEYS``, but for the epoch: a script fences
  on the copy of the epoch in its own keys' hash slot (:func:`rideout.store.keys.epoch_copy`),
  whose name the caller passes in ``ARGV`` and the script checks is a copy's. EVALSHA
  and FCALL count every key in ``KEYS`` as read *and* written for the ACL check; one
  outside it is checked command by command, so the ``GET`` of the copy is a read, which
  the app user's read-only pattern on Redis 7.0+ allows (:mod:`.acl`), and a write of
  it would be refused. Being in the script's own slot, the copy is on the node that
  runs the script, in a cluster too.
- Numbers cross the boundary as canonical decimal strings. JSON is built by hand:
  Redis's ``cjson`` writes numbers with 14 significant digits (a 13-digit millisecond
  timestamp fits, a 16-digit amount would not), so integers are formatted with
  ``%d`` and only strings go through ``cjson.encode``.
- Stream entry ids are compared as two decimal integers with arbitrary length, never
  as Lua numbers (doubles), so any u64 id a client sends compares exactly.
- The epoch's copy is read as a decimal string; where it is unset (data older than
  the copies) the epoch itself is read, and an unset epoch is ``0``; anything else is
  refused with an error starting ``rideout:``.
- Errors a script raises itself start with ``rideout:``.
"""

from __future__ import annotations

from typing import Final

from rideout.store import keys

__all__ = [
    "BID",
    "DEMO_NAME_CLAIM",
    "GET_ROOM",
    "GET_SESSION",
    "IDEMPOTENCY_CLAIM",
    "IDEMPOTENCY_FINISH",
    "LAST_OFFSET",
    "OIDC_BIND",
    "OIDC_PUT",
    "OIDC_READ",
    "OIDC_TAKE",
    "OIDC_TAKE_CODE",
    "PROBE",
    "READ_REVOCATIONS",
    "REVOKE",
]

if not keys.EPOCH.replace(":", "").isalnum():  # pragma: no cover - keys.py's to keep
    raise ValueError(f"{keys.EPOCH!r} cannot be written into a Lua string as it is")

_COMMON: Final = (
    f"local EPOCH, EPOCH_COPY = '{keys.EPOCH}', '{keys.EPOCH_COPY_PREFIX}'\n"
    + r"""
local function canonical_epoch(value)
  if value == false or value == nil then return '0' end
  if not string.match(value, '^%d+$') then return nil end
  local stripped = string.gsub(value, '^0+', '')
  if stripped == '' then return '0' end
  return stripped
end

-- The epoch as the copy named `name` holds it (canonical decimal, '0' when unset), or
-- nil and why not. A script reads only a copy (never another key the caller names).
-- Where the copy is unset (data older than the copies, which the controller writes
-- once per writer) the epoch itself is read: one Redis, so the same node.
local function read_epoch(name)
  if type(name) ~= 'string' or string.sub(name, 1, #EPOCH_COPY) ~= EPOCH_COPY then
    return nil, 'rideout: ' .. tostring(name) .. ' is not a copy of the epoch'
  end
  local value = redis.call('GET', name)
  if value == false then
    name = EPOCH
    value = redis.call('GET', EPOCH)
  end
  local epoch = canonical_epoch(value)
  if epoch == nil then
    return nil, 'rideout: ' .. name .. ' does not hold an integer epoch'
  end
  return epoch
end

local function cmp_decimal(a, b)
  if #a ~= #b then
    if #a < #b then return -1 end
    return 1
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      if x < y then return -1 end
      return 1
    end
  end
  return 0
end

-- Compare two canonical stream ids 'ms-seq': -1, 0 or 1.
local function cmp_id(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  local c = cmp_decimal(am, bm)
  if c ~= 0 then return c end
  return cmp_decimal(as, bs)
end

local function jint(n)
  if n == nil then return 'null' end
  return string.format('%d', n)
end

local function jstr(s)
  if s == nil then return 'null' end
  return cjson.encode(s)
end

local function num(v)
  if v == false or v == nil then return nil end
  return tonumber(v)
end

local function str(v)
  if v == false then return nil end
  return v
end

-- The public room state, as JSON: {"bid","bidder","bids","updated_at"}.
local function state_json(bid, bidder, bids, updated_at)
  return '{"bid":' .. jint(bid) .. ',"bidder":' .. jstr(bidder) ..
         ',"bids":' .. jint(bids) .. ',"updated_at":' .. jint(updated_at) .. '}'
end
"""
)

BID: Final = (
    _COMMON
    + f"local LEGACY_ACK = '{keys.PREFIX}user:{{'\n"
    + r"""
-- KEYS (all under the room's tag): 1 room state (hash), 2 room stream, 3 the user's
--       session in the room (hash), 4 bid ack (per sub, room and request id)
-- ARGV: 1 epoch the caller believes in (canonical decimal), 2 amount (decimal),
--       3 room, 4 sub, 5 request id, 6 min_bid, 7 max_bid, 8 min_increment,
--       9 history_size, 10 history_ttl (ms), 11 ack_ttl (ms), 12 the epoch's copy in
--       the room's slot, 13 and 14: acks stored under the user's tag before acks moved
--       under the room's (13 per room, 14 per user only, from before ids were scoped
--       per room), read and never written; '' for none (a cluster has none, and they
--       are keys of another slot)
-- Returns {kind, ack_json}; kind is 'new' (decided now), 'dup' (the stored ack of
-- an earlier call with this sub, room and request id) or 'stale' (fenced: nothing
-- changed).
local epoch, why = read_epoch(ARGV[12])
if epoch == nil then return redis.error_reply(why) end
for i = 13, 14 do
  if ARGV[i] ~= '' and string.sub(ARGV[i], 1, #LEGACY_ACK) ~= LEGACY_ACK then
    return redis.error_reply('rideout: ' .. ARGV[i] .. ' is not an ack under a user tag')
  end
end

local cur = redis.call('HMGET', KEYS[1], 'bid', 'bidder', 'bids', 'updated_at', 'offset')
local offset = str(cur[5]) or '0-0'
local room = ARGV[3]

local function ack_json(accepted, reason, ack_offset, state)
  return '{"accepted":' .. tostring(accepted) .. ',"reason":' .. jstr(reason) ..
         ',"epoch":' .. epoch .. ',"offset":' .. jstr(ack_offset) ..
         ',"room":' .. jstr(room) .. ',"state":' .. state .. '}'
end

local function current_state()
  return state_json(num(cur[1]) or 0, str(cur[2]), num(cur[3]) or 0, num(cur[4]))
end

-- (a) fencing: a server attached to a writer of another epoch changes nothing.
if epoch ~= ARGV[1] then
  return {'stale', ack_json(false, 'stale_epoch', offset, current_state())}
end

local ack_ttl = ARGV[11]

-- (b) idempotency: the first decision for (sub, room, request id) is final. Refreshing
-- the record's TTL is a write on purpose: it replicates after the original decision, so
-- a WAIT that follows a retried bid also covers the original (sync replication must
-- never acknowledge a retry whose first write has not reached the replica).
local ack_key = KEYS[4]
local stored = redis.call('GET', ack_key)
if not stored and ARGV[13] ~= '' then
  stored = redis.call('GET', ARGV[13])
  if stored then ack_key = ARGV[13] end
end
if not stored and ARGV[14] ~= '' then
  -- A decision stored per user only counts for the room it was made in.
  local legacy = redis.call('GET', ARGV[14])
  if legacy then
    local ok, decoded = pcall(cjson.decode, legacy)
    if ok and type(decoded) == 'table' and decoded['room'] == room then
      ack_key, stored = ARGV[14], legacy
    end
  end
end
if stored then
  redis.call('PEXPIRE', ack_key, ack_ttl)
  return {'dup', stored}
end

-- (c) validation
local amount = tonumber(ARGV[2])
local bids = num(cur[3]) or 0
local reason = nil
if amount < tonumber(ARGV[6]) or amount > tonumber(ARGV[7]) then
  reason = 'out_of_bounds'
elseif bids > 0 and amount < (num(cur[1]) or 0) + tonumber(ARGV[8]) then
  reason = 'too_low'
end
if reason then
  local ack = ack_json(false, reason, offset, current_state())
  redis.call('SET', KEYS[4], ack, 'PX', ack_ttl)
  return {'new', ack}
end

-- (d) accept
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
bids = bids + 1
local state = state_json(amount, ARGV[4], bids, now)
local id = redis.call('XADD', KEYS[2], '*', 'state', state, 'epoch', epoch)

-- Trim by size and by age. Both remove a prefix of the stream; remember the last
-- id removed, so that get_state knows which positions can still be replayed.
local cut = nil
local size = tonumber(ARGV[9])
local length = redis.call('XLEN', KEYS[2])
if length > size then
  local gone = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', length - size)
  cut = gone[#gone][1]
end
local cutoff = now - tonumber(ARGV[10])
local by_age = nil
if cutoff > 0 then
  local boundary = string.format('%d', cutoff) .. '-0'
  -- Only search for the newest expired entry when the oldest one has expired: that
  -- search walks the stream, and on most bids nothing is old enough to trim.
  local oldest = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
  local older = {}
  if #oldest > 0 and cmp_id(oldest[1][1], boundary) < 0 then
    older = redis.call('XREVRANGE', KEYS[2], '(' .. boundary, '-', 'COUNT', 1)
  end
  if #older > 0 then
    by_age = boundary
    if cut == nil or cmp_id(cut, older[1][1]) < 0 then cut = older[1][1] end
  end
end
if length > size then redis.call('XTRIM', KEYS[2], 'MAXLEN', size) end
if by_age then redis.call('XTRIM', KEYS[2], 'MINID', by_age) end

local fields = {'bid', ARGV[2], 'bidder', ARGV[4], 'bids', jint(bids), 'updated_at', jint(now),
                'offset', id}
if cut then
  table.insert(fields, 'trimmed')
  table.insert(fields, cut)
end
redis.call('HSET', KEYS[1], unpack(fields))

redis.call('HSET', KEYS[3], 'last_bid', ARGV[2], 'last_bid_room', room,
           'last_bid_id', ARGV[5],
           'last_position', '{"epoch":' .. epoch .. ',"offset":' .. jstr(id) .. '}')

local ack = ack_json(true, nil, id, state)
redis.call('SET', KEYS[4], ack, 'PX', ack_ttl)
return {'new', ack}
"""
)
"""Place one bid: fence on the epoch, replay a stored ack, validate, apply, trim."""

GET_ROOM: Final = (
    _COMMON
    + r"""
-- KEYS: 1 room state (hash), 2 room stream
-- ARGV: 1 since epoch (canonical decimal, '' for no since), 2 since offset
--       (canonical id), 3 most entries to replay, 4 the epoch's copy in the room's slot
-- Returns {epoch, room state fields, status, entries}; status is 'none' (no since),
-- 'recovered', 'epoch_changed', 'ahead', 'trimmed' or 'too_many'. The same for every
-- user (the user's session in the room is GET_SESSION's), so that a herd's
-- identical reads can share one. Read-only: runs on a replica as well as on the writer.
local epoch, why = read_epoch(ARGV[4])
if epoch == nil then return redis.error_reply(why) end
local state = redis.call('HGETALL', KEYS[1])
local pos = redis.call('HMGET', KEYS[1], 'offset', 'trimmed')
local last = str(pos[1]) or '0-0'
local trimmed = str(pos[2]) or '0-0'

local status = 'none'
local entries = {}
if ARGV[1] ~= '' then
  local since = ARGV[2]
  if ARGV[1] ~= epoch then
    status = 'epoch_changed'
  elseif cmp_id(since, last) > 0 then
    status = 'ahead'
  elseif cmp_id(since, trimmed) < 0 then
    status = 'trimmed'
  elseif cmp_id(since, last) == 0 then
    status = 'recovered'
  else
    local limit = tonumber(ARGV[3])
    entries = redis.call('XRANGE', KEYS[2], '(' .. since, '+', 'COUNT', limit + 1)
    if #entries > limit then
      status = 'too_many'
      entries = {}
    elseif #entries == 0 or entries[#entries][1] ~= last then
      -- the stream lost entries the state hash knows of (deleted or evicted)
      status = 'trimmed'
      entries = {}
    else
      status = 'recovered'
    end
  end
end
return {epoch, state, status, entries}
"""
)
"""Read a room's state and what was missed since a position (no user's session)."""

GET_SESSION: Final = r"""
-- KEYS: 1 the user's session in a room (hash). Returns its fields. Read-only. A
-- script only so that a herd's reads share one pipeline per loop iteration
-- (store.pipelining).
return redis.call('HGETALL', KEYS[1])
"""
"""A user's session in a room (its latest accepted bid there)."""

LAST_OFFSET: Final = r"""
-- KEYS: 1 room state (hash). Returns the id of the room's newest entry, or false.
-- Read-only (runs on a replica). A script only so that a herd's first subscribers of
-- many rooms share one pipeline (store.pipelining) instead of a pooled connection each.
return redis.call('HGET', KEYS[1], 'offset')
"""
"""The room's newest stream entry id (its state's ``offset`` field)."""

PROBE: Final = (
    _COMMON
    + r"""
-- KEYS: 1 the probe key (rideout:canary:REGION:ZONE)
-- ARGV: 1 epoch the caller believes in (canonical decimal), 2 value, 3 ttl (ms),
--       4 the epoch's copy in the probe key's slot
-- Returns {kind, epoch, value read back}: kind is 'written' (the writer took the write),
-- 'replica' (a read-only replica: it answered, the write was refused as on any
-- replica, or, registered as a read-only function, as in any read-only function) or
-- 'stale' (fenced as a bid would be: nothing written).
local epoch, why = read_epoch(ARGV[4])
if epoch == nil then return redis.error_reply(why) end
if epoch ~= ARGV[1] then
  return {'stale', epoch, false}
end
local written = redis.pcall('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if type(written) == 'table' and written.err then
  if string.find(written.err, 'READONLY', 1, true)
     or string.find(written.err, 'read-only script', 1, true) then
    return {'replica', epoch, redis.call('GET', KEYS[1])}
  end
  return redis.error_reply(written.err)
end
return {'written', epoch, redis.call('GET', KEYS[1])}
"""
)
"""The store probe: the epoch fence, then a write and a read of the zone's probe key."""

REVOKE: Final = r"""
-- KEYS: 1 revocations (hash), 2 revocations version (string)
-- ARGV: 1 field ('sub:NAME' or 'jti:ID'), 2 until (ms), 3 expires (ms), 4 at (ms),
--       5 now (ms: entries that expired before it are dropped), 6 the new version
-- Records the revocation (an existing one for the same field is only ever extended),
-- drops expired entries, lets the hash expire with its last entry, and changes the
-- version. Returns the number of entries in force.
local function ms(v)
  if type(v) ~= 'string' or not string.match(v, '^%d+$') then return nil end
  return tonumber(v)
end

local until_ms, expires, at = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local ok, entry = pcall(cjson.decode, old)
  if ok and type(entry) == 'table' then
    local u, e = tonumber(entry['until']), tonumber(entry['expires'])
    if u and u > until_ms then until_ms = u end
    if e and e > expires then expires = e end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('{"until":%d,"expires":%d,"at":%d}',
           until_ms, expires, at))

local now = ms(ARGV[5])
local last = expires
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, entry = pcall(cjson.decode, all[i + 1])
  local e = ok and type(entry) == 'table' and tonumber(entry['expires']) or nil
  if e == nil or e <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif e > last then
    last = e
  end
end
redis.call('PEXPIREAT', KEYS[1], string.format('%d', last))
redis.call('SET', KEYS[2], ARGV[6])
return redis.call('HLEN', KEYS[1])
"""
"""Record one revocation and prune the expired ones (one atomic call)."""

READ_REVOCATIONS: Final = r"""
-- KEYS: 1 revocations (hash), 2 revocations version (string)
-- Returns {version or false, {field, value, ...}}, read at one moment. Read-only: runs
-- on a replica as well as on the writer.
return {redis.call('GET', KEYS[2]), redis.call('HGETALL', KEYS[1])}
"""
"""Read the revocation list and its version together."""

IDEMPOTENCY_CLAIM: Final = r"""
-- KEYS[1] the key's record; ARGV[1] the in-flight record; ARGV[2] lease (ms).
-- The existing record, or false after marking the key in flight.
local record = redis.call('GET', KEYS[1])
if record then return record end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
"""The ``Idempotency-Key`` middleware's claim (:mod:`rideout.idempotency`)."""

IDEMPOTENCY_FINISH: Final = r"""
-- KEYS[1] the key's record; ARGV[1] the in-flight record this server wrote;
-- ARGV[2] 'store' | 'renew' | 'release'; ARGV[3] the final record; ARGV[4] ms.
-- 1 when done; 0 when the record is no longer ours (the lease lapsed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == 'store' then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
elseif ARGV[2] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""
"""The ``Idempotency-Key`` middleware's end of a request: store, renew or release."""

# The waiting room's OpenID adapter (rideout.waitingroom.oidc): one key each.
OIDC_TAKE: Final = (
    "local v = redis.call('GET', KEYS[1]) if v then redis.call('DEL', KEYS[1]) end return v"
)
OIDC_PUT: Final = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])"
OIDC_READ: Final = "return redis.call('GET', KEYS[1])"
OIDC_BIND: Final = (
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end "
    "return redis.call('GET', KEYS[1])"
)
# A code's record (KEYS[1]) is taken once: deleted and kept as spent (KEYS[2]) for as
# long as the tokens it gives live (its tokens_until, in s), ARGV[1] ms at least. A spent
# code presented again answers {'spent', record} once: its tokens are to be revoked.
OIDC_TAKE_CODE: Final = """
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('DEL', KEYS[1])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local lives = math.floor(cjson.decode(v)['tokens_until'] * 1000) - now
  redis.call('SET', KEYS[2], v, 'PX', math.max(lives, tonumber(ARGV[1])))
  return {'new', v}
end
local spent = redis.call('GET', KEYS[2])
if spent then
  redis.call('DEL', KEYS[2])
  return {'spent', spent}
end
return false
"""

# The demo sign-in (rideout.realtime.demo): claim or renew a name, counting new names
# against the quotas, in one step (Redis's clock: every zone of the region counts
# alike). KEYS: the name's claim, the region's names, and with a per-address cap the
# address's names (sorted sets scored by expiry, ms). ARGV: holder, ttl ms, the
# case-folded name, the cap in all, the cap per address, and '1' when the holder holds
# the name by a claim stored before claims moved beside the counts (renewed, and moved
# here, as one held). Answers {1, ms held}, {0, 0}
# when another holds the name, or {2 | 3, ms until the oldest name counted expires} at
# the cap in all | per address. A holder is the SHA-256 of a random secret, so comparing
# it in Lua's time leaks nothing worth having.
DEMO_NAME_CLAIM: Final = """
local held = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local sets = {KEYS[2], KEYS[3]}
if held and held ~= ARGV[1] then return {0, 0} end
if held or ARGV[6] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  for _, set in ipairs(sets) do
    redis.call('ZADD', set, 'XX', now + ttl, ARGV[3])
    redis.call('PEXPIRE', set, ttl)
  end
  return {1, ttl}
end
local caps = {tonumber(ARGV[4]), tonumber(ARGV[5])}
for i, set in ipairs(sets) do
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  if redis.call('ZCARD', set) >= caps[i] then
    local oldest = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    return {i + 1, tonumber(oldest[2]) - now}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
for _, set in ipairs(sets) do
  redis.call('ZADD', set, now + ttl, ARGV[3])
  redis.call('PEXPIRE', set, ttl)
end
return {1, ttl}
"""
