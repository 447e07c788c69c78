local pending = 0
local ok, summary = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1])
if ok and summary[1] then pending = tonumber(summary[1]) end
return {redis.call('XLEN', KEYS[1]), pending, redis.call('ZCARD', KEYS[2]),
        redis.call('XLEN', KEYS[4]), redis.call('XLEN', KEYS[6]), redis.call('HGETALL', KEYS[5]),
        tonumber(redis.call('HGET', KEYS[7], '\0w') or '0')}
