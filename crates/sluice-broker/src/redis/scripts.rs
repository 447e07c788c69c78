//! The Lua scripts of the Redis broker. Each runs atomically on the node
//! that owns the queue's hash slot; every key a script touches carries the
//! queue's hash tag, so nothing crosses slots on Redis Cluster.
//!
//! Times come from the server's clock (`TIME`), so hosts with skewed clocks
//! agree on when a delayed message is due.
//!
//! A message lives in exactly one place at a time: an entry of the queue's
//! stream (ready or leased), a packed body in the `bodies` hash plus a score
//! in the `delayed` sorted set (or in the `waiting` set, for a message
//! waiting for its ordered group), or an entry of the `dead` stream.
//!
//! Entry fields are short and written only when they say something, because
//! every field is stored, sent and parsed once per delivery: `i` id and `p`
//! payload always; `k` key (when it is not the id), `h` headers (JSON, when
//! there are any), `t` enqueued at in ms (when the entry was written later
//! than the message was enqueued; otherwise the entry id's time), `a`
//! attempts before this entry (when not 0), `e` last error, `c` scheduled
//! redrives the message has been through (when not 0; written by `REPLAY`,
//! then carried along like every other field, into the dead letter too),
//! `g` the message's ordered group (when it has one), `s` the times the
//! handler snoozed it (when not 0; a replay starts again from 0). A waiting
//! message of an ordered group that becomes active is written as one field
//! instead, `m`, all of its fields packed (msgpack) as it waited: the
//! cheapest way to move it (see `activate`); whatever reads an entry reads
//! both forms.
//! Dead letters add `r` reason, `v` handler version and `n` attempts; the
//! time of death is the dead entry's id, so `REPLAY`'s cut-off is the end of
//! an `XRANGE` and agrees with what `dlq list` shows. (A field written from
//! `TIME` at the start of the script can be a millisecond behind the id
//! that `XADD *` gives.)
//!
//! Every settle runs in `SETTLE`, because each op must be fenced by its
//! delivery before it is applied, which plain commands cannot do.

use std::sync::LazyLock;

use redis::Script;

/// What every script shares: the server's time, entry fields, and
/// queueing a body now or later.
const BASE: &str = r#"
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function set_field(f, name, value)
  for i = 1, #f, 2 do
    if f[i] == name then f[i + 1] = value; return end
  end
  table.insert(f, name); table.insert(f, value)
end
local function get_field(f, name)
  for i = 1, #f, 2 do
    if f[i] == name then return f[i + 1] end
  end
  return nil
end
-- Call f with the elements of list, at most 1,000 at a time: more than
-- `unpack` can pass.
local function in_chunks(list, f)
  for from = 1, #list, 1000 do f(unpack(list, from, math.min(from + 999, #list))) end
end
-- Whether `digest` is among a consumer's last settle writes, the list
-- `written` (see SETTLED in scripts.rs) ...
local function written_before(written, digest)
  return redis.call('LPOS', written, digest) ~= false
end
-- ... and adding it there, to the last 16, kept for `keep` ms.
local function remember_written(written, digest, keep)
  redis.call('LPUSH', written, digest)
  redis.call('LTRIM', written, 0, 15)
  redis.call('PEXPIRE', written, keep)
end
-- Queue a body now (stream) or later (bodies hash + delayed set).
local function enqueue(stream, delayed, bodies, id, fields, due, now)
  if due > now then
    redis.call('HSET', bodies, id, cmsgpack.pack(fields))
    redis.call('ZADD', delayed, due, id)
  else
    redis.call('XADD', stream, '*', unpack(fields))
  end
end
"#;

/// Moving an ordered group on (see [`PRELUDE`]): all that `ADVANCE` needs
/// beside [`BASE`].
const GROUP_CORE: &str = r#"-- Make a waiting body active. One that waits with a due time still ahead
-- when it was queued is that time, a space, then its packed fields: it is
-- queued for that time. The rest are their packed fields alone, written to
-- the stream as they are, in one field `m` (unpacking them and writing
-- each field costs the server more than the rest of moving a group on).
local function activate(S, Z, H, waiting, now)
  local first = string.byte(waiting, 1)
  if first >= 48 and first <= 57 then
    local sp = string.find(waiting, ' ', 1, true)
    local due = tonumber(string.sub(waiting, 1, sp - 1))
    waiting = string.sub(waiting, sp + 1)
    if due > now then
      local f = cmsgpack.unpack(waiting)
      enqueue(S, Z, H, get_field(f, 'i'), f, due, now)
      return
    end
  end
  redis.call('XADD', S, '*', 'm', waiting)
end
-- The active message of group g left for good (or the dead letter that
-- blocked it is gone): the oldest waiting one becomes active. (A group
-- with an active message is never blocked: a block is lifted only by
-- making its dead letter active again, or by this.) Returns 1 if one did,
-- for the caller to take off the count of waiting messages.
local function advance(S, Z, H, G, W, g, now)
  local waiting = redis.call('LPOP', W .. ':' .. g)
  if not waiting then redis.call('HDEL', G, g); return 0 end
  activate(S, Z, H, waiting, now)
  return 1
end
local function activated(G, n)
  if n > 0 then redis.call('HINCRBY', G, '\0w', -n) end
end
"#;

/// The rest of the helpers the scripts share.
const REST: &str = r#"-- Before an entry is written again, keep when its message was enqueued.
local function keep_time(f, entry)
  if not get_field(f, 't') then set_field(f, 't', string.match(entry, '^(%d+)')) end
end
local function del_field(f, name)
  for i = 1, #f, 2 do
    if f[i] == name then table.remove(f, i); table.remove(f, i); return end
  end
end
-- Ordered groups, in the queue's `groups` hash G and lists named from the
-- prefix W. G holds the ordering ("\0spec"), how many messages wait
-- ("\0w"), the dead letter blocking a group ("\0b" .. group) and, by group,
-- a mark while one of its messages is active or dead and blocking it (any
-- value: earlier versions counted the group's unsettled messages there,
-- which reads the same). Only one message of a group is active (in the
-- stream, delayed or leased) at a time; the others wait in order in the
-- list W .. ':' .. group (a key of the queue's hash slot, as its name
-- starts with W), as `activate` reads them.
local function enqueue_grouped(S, Z, H, G, W, id, fields, due, now, g)
  if g == '' then enqueue(S, Z, H, id, fields, due, now); return end
  set_field(fields, 'g', g)
  if redis.call('HSETNX', G, g, '1') == 1 then
    enqueue(S, Z, H, id, fields, due, now)
  else
    local waiting = cmsgpack.pack(fields)
    if due > now then waiting = due .. ' ' .. waiting end
    redis.call('RPUSH', W .. ':' .. g, waiting)
    redis.call('HINCRBY', G, '\0w', 1)
  end
end
-- Every blocked group of the queue moves on.
local function unblock_all(S, Z, H, G, W, now)
  local all = redis.call('HGETALL', G)
  local n = 0
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, 2) == '\0b' then
      redis.call('HDEL', G, all[j])
      n = n + advance(S, Z, H, G, W, string.sub(all[j], 3), now)
    end
  end
  activated(G, n)
end
-- Whether the ordering `spec` keeps a group blocked by a dead letter.
local function blocks(spec)
  return string.find(spec, '"block_on_dead":true', 1, true) ~= nil
end
-- Queue the message whose six arguments start at ARGV[i]: id, key ("" =
-- the id), payload, headers ("" = none), delay ms, group ("" = none).
local function enqueue_message(S, Z, H, G, W, i, now)
  local fields = {'i', ARGV[i], 'p', ARGV[i + 2]}
  if ARGV[i + 1] ~= '' and ARGV[i + 1] ~= ARGV[i] then set_field(fields, 'k', ARGV[i + 1]) end
  if ARGV[i + 3] ~= '' then set_field(fields, 'h', ARGV[i + 3]) end
  local delay = tonumber(ARGV[i + 4])
  if delay > 0 then set_field(fields, 't', tostring(now)) end
  enqueue_grouped(S, Z, H, G, W, ARGV[i], fields, now + delay, now, ARGV[i + 5])
end
-- The queue's ordering, "" for none.
local function ordering(G)
  return redis.call('HGET', G, '\0spec') or ''
end
-- The tokens in the rate bucket at `key` (fields tokens, at), refilled to
-- `now` at `per_ms` up to `burst`; a bucket not made yet is full.
local function refill(key, per_ms, burst, now)
  local state = redis.call('HMGET', key, 'tokens', 'at')
  if not state[1] then return burst end
  local elapsed = math.max(now - tonumber(state[2]), 0)
  return math.min(burst, tonumber(state[1]) + elapsed * per_ms)
end
"#;

/// Every helper, before each script's own code.
static PRELUDE: LazyLock<String> = LazyLock::new(|| format!("{BASE}{GROUP_CORE}{REST}"));

/// KEYS: stream, delayed, bodies, groups, waiting, counters, then with a
/// marker TTL one marker key per message. ARGV: marker TTL ms (0 = no
/// markers), the queue's ordering the groups were taken with ("" = none),
/// then six per message: id, key ("" = the id), payload, headers ("" =
/// none), delay ms, group ("" = none). A message with a marker is enqueued
/// only if its marker was not set yet: the outbox relay's idempotency.
/// Returns {enqueued}, or {-1, the queue's ordering} when it is not the one
/// the groups were taken with: the caller takes them again and retries.
pub(crate) static PUBLISH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local spec = ordering(KEYS[4])
if spec ~= ARGV[2] then return {-1, spec} end
local now = server_now()
local ttl = tonumber(ARGV[1])
local n, m, ungrouped = 0, 0, 0
for i = 3, #ARGV, 6 do
  m = m + 1
  local fresh = true
  if ttl > 0 then
    fresh = redis.call('SET', KEYS[6 + m], '1', 'NX', 'PX', ttl)
  end
  if fresh then
    enqueue_message(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], i, now)
    n = n + 1
    if spec ~= '' and ARGV[i + 5] == '' then ungrouped = ungrouped + 1 end
  end
end
if ungrouped > 0 then redis.call('HINCRBY', KEYS[6], 'ungrouped', ungrouped) end
return {n}
"#
    ))
});

/// KEYS: stream, delayed, bodies, groups, waiting. ARGV: the queue's
/// ordering ("" = none). Stores it; with none, every waiting message goes
/// to the queue (in order) and the groups are forgotten; with one whose
/// dead letters do not block, blocked groups move on. Returns 1 if it
/// changed, else 0.
pub(crate) static ORDER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local S, Z, H, G, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ordering(G) == ARGV[1] then return 0 end
local now = server_now()
if ARGV[1] == '' then
  local all = redis.call('HGETALL', G)
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, 1) ~= '\0' then
      local list = W .. ':' .. all[j]
      for _, packed in ipairs(redis.call('LRANGE', list, 0, -1)) do
        activate(S, Z, H, packed, now)
      end
      redis.call('DEL', list)
    end
  end
  redis.call('DEL', G)
  return 1
end
redis.call('HSET', G, '\0spec', ARGV[1])
if not blocks(ARGV[1]) then
  unblock_all(S, Z, H, G, W, now)
end
return 1
"#
    ))
});

/// KEYS: stream, delayed, bodies, leases. ARGV: group, consumer, lease ms,
/// max, cursor. Moves due delayed messages into the stream, then claims
/// entries whose lease (idle time) ran out. A lease is the longest that any
/// live consumer of the queue leases for: each says its own in `leases`
/// (as `lease expiry`, kept fresh by every call and dropped 30 s after its
/// consumer's last one), so that a host with a short lease never takes a
/// message from one that leased it for longer. Returns {next cursor,
/// {entry id, fields, delivery count}...}.
pub(crate) static MAINTAIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local group, consumer, lease, max = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = server_now()
redis.call('HSET', KEYS[4], consumer, lease .. ' ' .. (now + 30000))
local leases = redis.call('HGETALL', KEYS[4])
for j = 1, #leases, 2 do
  local l, until_ms = string.match(leases[j + 1], '^(%d+) (%d+)$')
  if l and tonumber(until_ms) > now then
    lease = math.max(lease, tonumber(l))
  else
    redis.call('HDEL', KEYS[4], leases[j])
  end
end
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(due) do
  local packed = redis.call('HGET', KEYS[3], id)
  if packed then
    redis.call('XADD', KEYS[1], '*', unpack(cmsgpack.unpack(packed)))
    redis.call('HDEL', KEYS[3], id)
  end
  redis.call('ZREM', KEYS[2], id)
end
local claimed = redis.call('XAUTOCLAIM', KEYS[1], group, consumer, lease, ARGV[5], 'COUNT', max)
local out = {}
for _, e in ipairs(claimed[2]) do
  if e[2] then
    local p = redis.call('XPENDING', KEYS[1], group, e[1], e[1], 1)
    local count = 1
    if p[1] then count = tonumber(p[1][4]) end
    table.insert(out, {e[1], e[2], count})
  end
end
return {claimed[1], out}
"#
    ))
});

/// KEYS: stream, flow. ARGV: group, consumer, count, max in flight (0 for
/// none), leases a millisecond (0 for no rate), bucket size, deliveries the
/// batch already has (reclaimed by `MAINTAIN`, which spend tokens too).
/// Reads up to `count` new entries, as `XREADGROUP` without `BLOCK` does,
/// but no more than leave `max in flight` entries pending in the group
/// (leased, or waiting to be reclaimed) and no more than the whole tokens
/// in the queue's rate bucket, refilled by the server's clock. In one step,
/// so that hosts reading at once cannot both take the last place. For a
/// queue with `max_in_flight` (a rate alone goes through `TOKENS`, because
/// a reply passed through Lua costs the server about 1.5 µs a message).
/// Returns the `XREADGROUP` reply, or nil.
pub(crate) static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local group, consumer, want = ARGV[1], ARGV[2], tonumber(ARGV[3])
local limit, per_ms, burst, spent = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = server_now()
if limit > 0 then
  local pending = redis.call('XPENDING', KEYS[1], group)[1]
  want = math.min(want, math.max(limit - pending, 0))
end
local tokens = 0
if per_ms > 0 then
  tokens = refill(KEYS[2], per_ms, burst, now) - spent
  want = math.min(want, math.max(math.floor(tokens), 0))
end
local reply = false
local got = 0
if want > 0 then
  reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', KEYS[1], '>')
  if reply then got = #reply[1][2] end
end
if per_ms > 0 then
  redis.call('HSET', KEYS[2], 'tokens', tostring(tokens - got), 'at', now)
end
return reply
"#
    ))
});

/// KEYS: flow. ARGV: count wanted, leases a millisecond, bucket size,
/// tokens to give back first (negative: to take, for deliveries reclaimed
/// outside the bucket). Refills the queue's rate bucket by the server's
/// clock and grants up to `count` whole tokens, taken at once. A queue with
/// a rate and no `max in flight` reads with a plain `XREADGROUP` only what
/// it holds tokens for: see `read_rated`. Returns the tokens granted. Short
/// and self-contained, because it is also sent whole (`EVAL`) in the
/// pipeline of a read, where a script missing from the server's cache
/// would fail the read beside it.
pub(crate) static TOKENS_SOURCE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local want, per_ms, burst, back = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = burst
if state[1] then
  tokens = math.min(burst, tonumber(state[1]) + math.max(now - tonumber(state[2]), 0) * per_ms)
end
tokens = math.min(burst, tokens + back)
local granted = math.min(want, math.max(math.floor(tokens), 0))
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - granted), 'at', now)
return granted
"#;

/// [`TOKENS_SOURCE`] as a script, for the calls outside a read's pipeline.
pub(crate) static TOKENS: LazyLock<Script> = LazyLock::new(|| Script::new(TOKENS_SOURCE));

/// KEYS: stream, delayed, bodies, groups, waiting, schedules. ARGV:
/// schedule, tick ms, the queue's ordering the group was taken with, then,
/// to publish, the message's six as in `PUBLISH`. Fires the tick unless the
/// schedule's last tick (a field of `schedules`) is at or after it: records
/// it, and enqueues the message when there is one. Returns {1} if it fired,
/// {0} if not, or {-1, the queue's ordering} as `PUBLISH` does.
pub(crate) static FIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local spec = ordering(KEYS[4])
if #ARGV >= 9 and spec ~= ARGV[3] then return {-1, spec} end
local tick = tonumber(ARGV[2])
local last = redis.call('HGET', KEYS[6], ARGV[1])
if last and tonumber(last) >= tick then return {0} end
redis.call('HSET', KEYS[6], ARGV[1], ARGV[2])
if #ARGV >= 9 then
  enqueue_message(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], 4, server_now())
end
return {1}
"#
    ))
});

/// KEYS: stream, then the idempotency keys the leases hold. ARGV: group,
/// consumer, lease ms, then per lease its entry, delivery count, key index
/// (0 = none) and holder (the delivery's receipt). Each lease that is still
/// this consumer's at this delivery count starts again (`XCLAIM JUSTID`
/// resets the entry's idle time without counting a delivery), and so does
/// its key's lease if the key still holds it. Returns 1 per lease kept, 0
/// per lease lost.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local S, group, consumer, lease = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local out = {}
for i = 4, #ARGV, 4 do
  local entry, count, kidx, holder = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local p = redis.call('XPENDING', S, group, entry, entry, 1)
  if p[1] ~= nil and p[1][2] == consumer and tonumber(p[1][4]) == tonumber(count) then
    redis.call('XCLAIM', S, group, consumer, 0, entry, 'JUSTID')
    if kidx > 0 and redis.call('GET', KEYS[kidx]) == 'L:' .. holder then
      redis.call('PEXPIRE', KEYS[kidx], lease)
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
"#,
    )
});

/// KEYS: idempotency keys whose `SET NX GET` found the claiming delivery's
/// own lease (it claimed again). ARGV: lease ms, then one holder (the
/// delivery's receipt) per key. Checks and renews in one step, because in
/// between the key may run out: renews a key that still holds the
/// delivery's lease, takes one that ran out, and leaves any other value
/// alone. Returns per key 0 (acquired), 1 (already done) or
/// 2 (busy).
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local out = {}
for j, k in ipairs(KEYS) do
  local lease = 'L:' .. ARGV[j + 1]
  local v = redis.call('GET', k)
  if not v then
    redis.call('SET', k, lease, 'PX', ARGV[1]); out[j] = 0
  elseif v == lease then
    redis.call('PEXPIRE', k, ARGV[1]); out[j] = 0
  elseif string.sub(v, 1, 2) == 'D:' then
    out[j] = 1
  else
    out[j] = 2
  end
end
return out
"#,
    )
});

/// KEYS: stream, delayed, bodies, dead, counters, outbox, dead index (a
/// hash of dead letters' stream entries by message id), groups, waiting,
/// this consumer's last settle writes (see [`SETTLED`]), then the
/// idempotency keys the ops refer to. ARGV: group, consumer, the write's
/// digest, how long to keep it (ms), then ops, each `kind, entry,
/// delivery count, key index (0 = none), message id, attempt, ordered
/// group ("" = none)` followed by:
///   D (done):      retention ms, publish count, then 6 per publish:
///                  queue, id, key, payload, headers, delay ms
///   U (duplicate): nothing
///   R (retry):     delay ms, error
///   F (defer):     delay ms
///   Z (snooze):    delay ms; a defer that also counts one more snooze
///   X (dead):      reason, error, version, notice count (0 or 1), then 6
///                  per notice as for D; the notice is written to the outbox
///                  with the dead letter
/// Every op is fenced by its delivery (entry and delivery count: the
/// receipt, and the holder of its idempotency key): an op whose delivery
/// lost its lease is applied in no part and counted as `lost`. A done with
/// a key is fenced by the key: it holds this delivery's lease, or none (no
/// other delivery took it); one whose key another message finished is a
/// duplicate, one whose key another delivery of it finished is lost.
/// Every other op is fenced by the pending entry: still this consumer's,
/// at this delivery count. A done, duplicate or dead message of an ordered
/// group hands its group on to the next (a dead one blocks it instead when
/// the ordering says so). Returns the ids of the refused ops; nil, having
/// applied nothing, when the write's digest is among the consumer's last
/// writes (it was applied, and is sent again because its reply was lost).
pub(crate) static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local S, Z, H, D, C, O, DI, G, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local group, consumer = ARGV[1], ARGV[2]
if written_before(KEYS[10], ARGV[3]) then return false end
local now = server_now()
-- Removals and counter updates are collected and applied once per batch.
local removed, removed_list = {}, {}
local counts = {done = 0, duplicates = 0, retried = 0, lost = 0}
local function body(entry)
  if removed[entry] then return nil end
  local r = redis.call('XRANGE', S, entry, entry)
  if r[1] == nil then return nil end
  local f = r[1][2]
  if f[1] == 'm' then return cmsgpack.unpack(f[2]) end
  return f
end
local function remove(entry)
  if not removed[entry] then
    removed[entry] = true
    table.insert(removed_list, entry)
  end
end
-- Append `n` publishes, six ARGV each from `at`, to the outbox.
local function to_outbox(at, n)
  for p = 0, n - 1 do
    local b = at + p * 6
    redis.call('XADD', O, '*', 'q', ARGV[b], 'i', ARGV[b + 1], 'k', ARGV[b + 2],
               'p', ARGV[b + 3], 'h', ARGV[b + 4], 'd', ARGV[b + 5])
  end
end
local function release(key, holder)
  if key and redis.call('GET', key) == 'L:' .. holder then redis.call('DEL', key) end
end
local function owned(entry, count)
  if removed[entry] then return false end
  local p = redis.call('XPENDING', S, group, entry, entry, 1)
  return p[1] ~= nil and p[1][2] == consumer and tonumber(p[1][4]) == tonumber(count)
end
local spec = nil
local moved_on = 0
local function hand_on(g)
  if g ~= '' then moved_on = moved_on + advance(S, Z, H, G, W, g, now) end
end
local lost = {}
local i = 5
while i <= #ARGV do
  local kind, entry, count, kidx, id, attempt, g =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6]
  local holder = entry .. ' ' .. count
  local key = nil
  if kidx > 0 then key = KEYS[10 + kidx] end
  i = i + 7
  if kind == 'D' then
    local retention, npub = ARGV[i], tonumber(ARGV[i + 1])
    i = i + 2
    local verdict
    if key then
      local v = redis.call('GET', key)
      if v == false or v == 'L:' .. holder then
        redis.call('SET', key, 'D:' .. id, 'PX', retention)
        verdict = 'first'
      elseif v == 'D:' .. id then
        -- Another delivery of this message finished it.
        verdict = 'lost'
      elseif string.sub(v, 1, 2) == 'D:' then
        verdict = 'duplicate'
      else
        verdict = 'lost'
      end
    elseif owned(entry, count) then
      verdict = 'first'
    else
      verdict = 'lost'
    end
    if verdict == 'lost' then
      table.insert(lost, id)
    else
      remove(entry)
      hand_on(g)
      if verdict == 'first' then
        to_outbox(i, npub)
        counts.done = counts.done + 1
      else
        counts.duplicates = counts.duplicates + 1
      end
    end
    i = i + npub * 6
  elseif kind == 'U' then
    if owned(entry, count) then
      remove(entry)
      hand_on(g)
      counts.duplicates = counts.duplicates + 1
    else
      table.insert(lost, id)
    end
  elseif kind == 'R' or kind == 'F' or kind == 'Z' then
    local delay = tonumber(ARGV[i])
    local f = owned(entry, count) and body(entry)
    if f then
      keep_time(f, entry)
      if kind == 'R' then
        set_field(f, 'a', tostring(attempt)); set_field(f, 'e', ARGV[i + 1])
        counts.retried = counts.retried + 1
      else
        set_field(f, 'a', tostring(attempt - 1))
        if kind == 'Z' then
          set_field(f, 's', tostring(tonumber(get_field(f, 's') or '0') + 1))
        end
      end
      remove(entry)
      enqueue(S, Z, H, id, f, now + delay, now)
      release(key, holder)
    else
      table.insert(lost, id)
    end
    if kind == 'R' then i = i + 2 else i = i + 1 end
  elseif kind == 'X' then
    local f = owned(entry, count) and body(entry)
    if f then
      remove(entry)
      keep_time(f, entry)
      set_field(f, 'e', ARGV[i + 1])
      for _, kv in ipairs({{'r', ARGV[i]}, {'v', ARGV[i + 2]}, {'n', tostring(attempt)}}) do
        set_field(f, kv[1], kv[2])
      end
      redis.call('HSET', DI, id, redis.call('XADD', D, '*', unpack(f)))
      spec = spec or ordering(G)
      if g ~= '' and blocks(spec) then
        redis.call('HSET', G, '\0b' .. g, id)
      else
        hand_on(g)
      end
      to_outbox(i + 4, tonumber(ARGV[i + 3]))
      release(key, holder)
    else
      table.insert(lost, id)
    end
    i = i + 4 + tonumber(ARGV[i + 3]) * 6
  else
    return redis.error_reply('unknown settlement kind ' .. tostring(kind))
  end
end
in_chunks(removed_list, function(...)
  redis.call('XACK', S, group, ...)
  redis.call('XDEL', S, ...)
end)
activated(G, moved_on)
counts.lost = #lost
for name, n in pairs(counts) do
  if n > 0 then redis.call('HINCRBY', C, name, n) end
end
remember_written(KEYS[10], ARGV[3], ARGV[4])
return lost
"#
    ))
});

/// Each consumer's last settle writes of a queue are a list (`settled:`
/// and the consumer's name, with the queue's hash tag) of their digests
/// (`codec::settle_digest`), the last 16, kept for ten minutes after the
/// last write. A write is sent again only after its reply was lost, by the
/// host that sent it, before it writes more than one other (a worker has at
/// most two settle writes out), so the list finds it. `SETTLE` applies
/// nothing for a write it finds there; a plain ack's transaction (see
/// `settle_plain`) has this script count it:
///
/// KEYS: the consumer's last writes, counters. ARGV: the write's digest,
/// how long to keep it (ms), then pairs of a counter's name and how much
/// to add. Returns 1, having counted nothing, when the write was written
/// before; else counts, remembers the write, and returns 0.
pub(crate) static SETTLED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{BASE}{}",
        r#"
if written_before(KEYS[1], ARGV[1]) then return 1 end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
remember_written(KEYS[1], ARGV[1], ARGV[2])
return 0
"#
    )
});

/// KEYS: stream, delayed, bodies, groups. ARGV: the prefix of the waiting
/// lists, the consumer group, then for each message of an ordered group
/// that a plain ack (see `settle_plain`) removes, its entry and its group.
/// The entries are acked here, and a group moves on (as in `SETTLE`) only
/// if the ack took its entry out of the pending list: an ack written again
/// after its reply was lost finds it gone and moves nothing on, so a group
/// never has two messages out. One `XACK` takes them all; when it took
/// fewer than there are, the ones it took are those still in the stream,
/// as every ack of this broker deletes its entry in the same step (here the
/// `XDEL` after this in the `MULTI`). Sent whole (`EVAL`) inside the ack's
/// `MULTI`, so that both happen or neither even on a server that lost its
/// script cache.
pub(crate) static ADVANCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{BASE}{GROUP_CORE}{}",
        r#"
local S, group = KEYS[1], ARGV[2]
local entries = {}
for i = 3, #ARGV, 2 do entries[#entries + 1] = ARGV[i] end
local acked = 0
in_chunks(entries, function(...) acked = acked + redis.call('XACK', S, group, ...) end)
if acked == 0 then return 0 end
local now = server_now()
local all, seen = acked == #entries, {}
local n = 0
for i = 3, #ARGV, 2 do
  local took = all
  if not took and not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    took = #redis.call('XRANGE', S, ARGV[i], ARGV[i]) == 1
  end
  if took then n = n + advance(S, KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[i + 1], now) end
end
activated(KEYS[4], n)
return n
"#
    )
});

/// KEYS: stream, delayed, bodies, dead, counters, outbox, groups. ARGV:
/// group. Returns {ready + in flight, in flight, delayed, dead, in outbox,
/// counters, waiting in ordered groups}.
pub(crate) static STATS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local pending = 0
local ok, summary = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1])
if ok and summary[1] then pending = tonumber(summary[1]) end
return {redis.call('XLEN', KEYS[1]), pending, redis.call('ZCARD', KEYS[2]),
        redis.call('XLEN', KEYS[4]), redis.call('XLEN', KEYS[6]), redis.call('HGETALL', KEYS[5]),
        tonumber(redis.call('HGET', KEYS[7], '\0w') or '0')}
"#,
    )
});

/// KEYS: dead, dead index, stream, delayed, bodies, groups, waiting. ARGV: after (an exclusive start like `(1-0`, or
/// `-`), until (the last death time in ms, or `+`), scan (entries to look
/// at, at most), limit (most to move; 0 = no limit), max redrives (-1 = any),
/// redrive (1 = count one more redrive), then the ids to take (any when
/// none). Moves the matching dead letters among the next `scan` entries back
/// to the stream with attempts reset, oldest first, keeping their redrive
/// count (plus one for a redrive). A dead letter of an ordered group leads
/// it again if it blocked it, and otherwise rejoins it behind its waiting
/// messages. Returns {moved, the last entry looked at,
/// or "" when nothing is left to look at}: the caller goes on from there, so
/// no one call holds Redis for a long dead-letter stream.
pub(crate) static REPLAY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local scan, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_redrives, redrive = tonumber(ARGV[5]), ARGV[6] == '1'
local wanted, any_id = {}, #ARGV == 6
for i = 7, #ARGV do wanted[ARGV[i]] = true end
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', scan)
local moved, last = 0, ''
for _, e in ipairs(entries) do
  if limit > 0 and moved >= limit then break end
  last = e[1]
  local f = e[2]
  local id = get_field(f, 'i')
  local redrives = tonumber(get_field(f, 'c') or '0')
  if (any_id or wanted[id]) and (max_redrives < 0 or redrives < max_redrives) then
    local back = {'i', id, 'p', get_field(f, 'p'), 't', get_field(f, 't') or string.match(e[1], '^(%d+)')}
    for _, name in ipairs({'k', 'h', 'e'}) do
      local v = get_field(f, name)
      if v and v ~= '' then set_field(back, name, v) end
    end
    if redrive then redrives = redrives + 1 end
    if redrives > 0 then set_field(back, 'c', tostring(redrives)) end
    local g = get_field(f, 'g') or ''
    local now = server_now()
    if g ~= '' and redis.call('HGET', KEYS[6], '\0b' .. g) == id then
      redis.call('HDEL', KEYS[6], '\0b' .. g)
      set_field(back, 'g', g)
      redis.call('XADD', KEYS[3], '*', unpack(back))
    else
      enqueue_grouped(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], id, back, now, now, g)
    end
    redis.call('XDEL', KEYS[1], e[1])
    redis.call('HDEL', KEYS[2], id)
    moved = moved + 1
  end
end
if #entries < scan then last = '' end
return {moved, last}
"#
    ))
});

/// KEYS: dead, dead index, stream, delayed, bodies, groups, waiting.
/// Deletes the queue's dead letters, and the groups they blocked move on;
/// returns how many.
pub(crate) static PURGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        *PRELUDE,
        r#"
local n = redis.call('XLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
unblock_all(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], server_now())
return n
"#
    ))
});

/// KEYS: dead, dead index, outbox. ARGV: outbox entry, id, payload,
/// reason. Moves an outbox entry the relay cannot read to the queue's dead
/// letters (its fields as the payload), so that it no longer stops the
/// relay of the entries behind it.
pub(crate) static BURY_HELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local deid = redis.call('XADD', KEYS[1], '*', 'i', ARGV[2], 'p', ARGV[3], 'r', ARGV[4], 'n', '0')
redis.call('HSET', KEYS[2], ARGV[2], deid)
redis.call('XDEL', KEYS[3], ARGV[1])
return 1
"#,
    )
});
