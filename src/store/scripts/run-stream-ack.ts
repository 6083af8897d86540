import { script, type ScriptDef } from "../script.js";

/**
 * Settles runs of one shard's run stream (store/run-stream.ts): acknowledges and deletes each entry and,
 * in its user's place, moves the user's oldest parked run into the stream (else takes the entry
 * off the user's count; the field goes at 0). An entry no longer pending (acknowledged already by
 * a consumer that took it over) changes nothing, so a count never goes below what is in the stream.
 * KEYS[1] the shard's run stream, KEYS[2] its per-user counts (hash), KEYS[3] its parked runs (hash "<user> <seq>" -> job),
 * KEYS[4] parked ends (hash "h <user>"/"t <user>" -> seq). ARGV[1] group; then per run: entry id, user id.
 * Returns how many entries were acknowledged.
 */
export const RUN_STREAM_ACK: ScriptDef = script(
  "tribRunStreamAck",
  4,
  `
local acked = 0
for i = 2, #ARGV, 2 do
  local id, user = ARGV[i], ARGV[i + 1]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    acked = acked + 1
    redis.call('XDEL', KEYS[1], id)
    local moved = false
    local tail = tonumber(redis.call('HGET', KEYS[4], 't ' .. user))
    while tail and not moved do
      local head = redis.call('HINCRBY', KEYS[4], 'h ' .. user, 1)
      local field = user .. ' ' .. head
      local job = redis.call('HGET', KEYS[3], field)
      if job then
        redis.call('HDEL', KEYS[3], field)
        redis.call('XADD', KEYS[1], '*', 'u', user, 'j', job)
        moved = true
      end
      if head >= tail then
        redis.call('HDEL', KEYS[4], 'h ' .. user, 't ' .. user)
        tail = nil
      end
    end
    if not moved and redis.call('HINCRBY', KEYS[2], user, -1) <= 0 then redis.call('HDEL', KEYS[2], user) end
  end
end
return acked
`,
);
