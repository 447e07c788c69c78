-- The server's clock in ms; and the microseconds of its second, which a
-- publish writes as `u`.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t[2]
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
-- Queue a body now (stream) or later (bodies hash + delayed set). A body
-- due before every other delayed one of its queue rings the queue's wake
-- stream (its key is the delayed set's with `wake` for `delayed`): a
-- reader idle until the earliest due time it saw looks again.
local function enqueue(stream, delayed, bodies, id, fields, due, now)
  if due > now then
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    redis.call('HSET', bodies, id, cmsgpack.pack(fields))
    redis.call('ZADD', delayed, due, id)
    if first[2] == nil or tonumber(first[2]) > due then
      redis.call('XADD', string.sub(delayed, 1, -8) .. 'wake', 'MAXLEN', '1', '*', 'w', '1')
    end
  else
    redis.call('XADD', stream, '*', unpack(fields))
  end
end
