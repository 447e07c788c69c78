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
