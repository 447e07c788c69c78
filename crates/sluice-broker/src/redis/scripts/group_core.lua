-- Make a waiting body active. One that waits with a due time still ahead
-- when it was queued is that time, a space, then its packed fields: it is
-- queued for that time. The rest are their packed fields alone, written to
-- the stream as they are, in one field `m` (unpacking them and writing
-- each field costs the server more than the rest of moving a group on).
local function activate(S, Z, H, waiting, now)
  local first = string.byte(waiting, 1)
  if first >= 48 and first <= 57 then
    local sp = string.find(waiting, ' ', 1, true)
    local due = tonumber(string.sub(waiting, 1, sp - 1))
    waiting = string.sub(waiting, sp + 1)
    if due > now then
      local f = cmsgpack.unpack(waiting)
      enqueue(S, Z, H, get_field(f, 'i'), f, due, now)
      return
    end
  end
  redis.call('XADD', S, '*', 'm', waiting)
end
-- The active message of group g left for good (or the dead letter that
-- blocked it is gone): the oldest waiting one becomes active. (A group
-- with an active message is never blocked: a block is lifted only by
-- making its dead letter active again, or by this.) Returns 1 if one did,
-- for the caller to take off the count of waiting messages.
local function advance(S, Z, H, G, W, g, now)
  local waiting = redis.call('LPOP', W .. ':' .. g)
  if not waiting then redis.call('HDEL', G, g); return 0 end
  activate(S, Z, H, waiting, now)
  return 1
end
local function activated(G, n)
  if n > 0 then redis.call('HINCRBY', G, '\0w', -n) end
end
