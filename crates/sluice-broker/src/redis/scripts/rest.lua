-- Before an entry is written again, keep when its message was enqueued.
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
    -- Written when its turn comes: the enqueue time goes with it.
    if not get_field(fields, 't') then set_field(fields, 't', tostring(now)) end
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
local function enqueue_message(S, Z, H, G, W, i, now, us)
  local fields = {'i', ARGV[i], 'p', ARGV[i + 2], 'u', us}
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
