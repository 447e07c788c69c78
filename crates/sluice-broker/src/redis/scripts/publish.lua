local spec = ordering(KEYS[4])
if spec ~= ARGV[2] then return {-1, spec} end
local now, us = server_now()
local ttl = tonumber(ARGV[1])
local n, m, ungrouped = 0, 0, 0
for i = 3, #ARGV, 6 do
  m = m + 1
  local fresh = true
  if ttl > 0 then
    fresh = redis.call('SET', KEYS[6 + m], '1', 'NX', 'PX', ttl)
  end
  if fresh then
    enqueue_message(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], i, now, us)
    n = n + 1
    if spec ~= '' and ARGV[i + 5] == '' then ungrouped = ungrouped + 1 end
  end
end
if ungrouped > 0 then redis.call('HINCRBY', KEYS[6], 'ungrouped', ungrouped) end
return {n}
