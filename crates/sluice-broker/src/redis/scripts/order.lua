local S, Z, H, G, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ordering(G) == ARGV[1] then return 0 end
local now = server_now()
if ARGV[1] == '' then
  local all = redis.call('HGETALL', G)
  for j = 1, #all, 2 do
    if string.sub(all[j], 1, 1) ~= '\0' then
      local list = W .. ':' .. all[j]
      for _, packed in ipairs(redis.call('LRANGE', list, 0, -1)) do
        activate(S, Z, H, packed, now)
      end
      redis.call('DEL', list)
    end
  end
  redis.call('DEL', G)
  return 1
end
redis.call('HSET', G, '\0spec', ARGV[1])
if not blocks(ARGV[1]) then
  unblock_all(S, Z, H, G, W, now)
end
return 1
