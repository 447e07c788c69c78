if written_before(KEYS[1], ARGV[1]) then return 1 end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
remember_written(KEYS[1], ARGV[1], ARGV[2])
return 0
