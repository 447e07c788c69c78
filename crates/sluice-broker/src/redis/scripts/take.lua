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
