local S, group, consumer, lease = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local out = {}
for i = 4, #ARGV, 4 do
  local entry, count, kidx, holder = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local p = redis.call('XPENDING', S, group, entry, entry, 1)
  if p[1] ~= nil and p[1][2] == consumer and tonumber(p[1][4]) == tonumber(count) then
    redis.call('XCLAIM', S, group, consumer, 0, entry, 'JUSTID')
    if kidx > 0 and redis.call('GET', KEYS[kidx]) == 'L:' .. holder then
      redis.call('PEXPIRE', KEYS[kidx], lease)
    end
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
