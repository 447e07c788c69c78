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
