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
