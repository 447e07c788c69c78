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
