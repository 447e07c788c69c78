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
