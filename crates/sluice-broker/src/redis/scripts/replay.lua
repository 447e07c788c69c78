local scan, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_redrives, redrive = tonumber(ARGV[5]), ARGV[6] == '1'
local wanted, any_id = {}, #ARGV == 6
for i = 7, #ARGV do wanted[ARGV[i]] = true end
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', scan)
local moved, last = 0, ''
for _, e in ipairs(entries) do
  if limit > 0 and moved >= limit then break end
  last = e[1]
  local f = e[2]
  local id = get_field(f, 'i')
  local redrives = tonumber(get_field(f, 'c') or '0')
  if (any_id or wanted[id]) and (max_redrives < 0 or redrives < max_redrives) then
    local back = {'i', id, 'p', get_field(f, 'p'), 't', get_field(f, 't') or string.match(e[1], '^(%d+)')}
    for _, name in ipairs({'k', 'h', 'e', 'u'}) do
      local v = get_field(f, name)
      if v and v ~= '' then set_field(back, name, v) end
    end
    if redrive then redrives = redrives + 1 end
    if redrives > 0 then set_field(back, 'c', tostring(redrives)) end
    local g = get_field(f, 'g') or ''
    local now = server_now()
    if g ~= '' and redis.call('HGET', KEYS[6], '\0b' .. g) == id then
      redis.call('HDEL', KEYS[6], '\0b' .. g)
      set_field(back, 'g', g)
      redis.call('XADD', KEYS[3], '*', unpack(back))
    else
      enqueue_grouped(KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], id, back, now, now, g)
    end
    redis.call('XDEL', KEYS[1], e[1])
    redis.call('HDEL', KEYS[2], id)
    moved = moved + 1
  end
end
if #entries < scan then last = '' end
return {moved, last}
