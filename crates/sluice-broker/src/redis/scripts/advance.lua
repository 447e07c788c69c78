local S, group = KEYS[1], ARGV[2]
local entries = {}
for i = 3, #ARGV, 2 do entries[#entries + 1] = ARGV[i] end
local acked = 0
in_chunks(entries, function(...) acked = acked + redis.call('XACK', S, group, ...) end)
if acked == 0 then return 0 end
local now = server_now()
local all, seen = acked == #entries, {}
local n = 0
for i = 3, #ARGV, 2 do
  local took = all
  if not took and not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    took = #redis.call('XRANGE', S, ARGV[i], ARGV[i]) == 1
  end
  if took then n = n + advance(S, KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[i + 1], now) end
end
activated(KEYS[4], n)
return n
