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
-- What an idle reader needs to wait without missing anything: when the
-- next delayed message is due (ms from now, -1 for none), how many entries
-- are leased, the group's last delivered entry and the wake stream's last.
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next_due = -1
if first[2] then next_due = math.max(0, tonumber(first[2]) - now) end
local pending = redis.call('XPENDING', KEYS[1], group)[1]
local delivered = '0-0'
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for j = 1, #g, 2 do
    if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then last = g[j + 1] end
  end
  if name == group and last then delivered = last end
end
local rung = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)
local wake = '0-0'
if rung[1] then wake = rung[1][1] end
return {claimed[1], out, next_due, pending, delivered, wake}
