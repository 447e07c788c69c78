local deid = redis.call('XADD', KEYS[1], '*', 'i', ARGV[2], 'p', ARGV[3], 'r', ARGV[4], 'n', '0')
redis.call('HSET', KEYS[2], ARGV[2], deid)
redis.call('XDEL', KEYS[3], ARGV[1])
return 1
