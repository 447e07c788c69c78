local n = redis.call('XLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
unblock_all(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], server_now())
return n
