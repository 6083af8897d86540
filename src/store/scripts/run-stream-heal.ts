import { script, type ScriptDef } from "../script.js";

/**
 * Heals a shard's run stream's per-user counts once the stream is empty (store/run-stream.ts): with no
 * entry in it no run can be in flight, so every count left is drift (entries deleted from outside
 * the ack script: an operator's XDEL, a partial restore). Clears the counts and moves up to ARGV[1]
 * parked runs of each user with parked runs into the stream, oldest first, as if their share had
 * just freed. Does nothing while the stream holds an entry.
 * KEYS[1] the shard's run stream, KEYS[2] its per-user counts (hash), KEYS[3] its parked runs (hash "<user> <seq>" -> job),
 * KEYS[4] parked ends (hash "h <user>"/"t <user>" -> seq). ARGV[1] entries per user at most.
 * Returns how many parked runs were moved in (-1: the stream was not empty).
 */
export const RUN_STREAM_HEAL: ScriptDef = script(
  "tribRunStreamHeal",
  4,
  `
if redis.call('XLEN', KEYS[1]) > 0 then return -1 end
redis.call('DEL', KEYS[2])
local cap = tonumber(ARGV[1])
local moved = 0
for _, f in ipairs(redis.call('HKEYS', KEYS[4])) do
  if string.sub(f, 1, 2) == 't ' then
    local user = string.sub(f, 3)
    local n = 0
    local tail = tonumber(redis.call('HGET', KEYS[4], f))
    while tail and n < cap do
      local head = redis.call('HINCRBY', KEYS[4], 'h ' .. user, 1)
      local field = user .. ' ' .. head
      local job = redis.call('HGET', KEYS[3], field)
      if job then
        redis.call('HDEL', KEYS[3], field)
        redis.call('XADD', KEYS[1], '*', 'u', user, 'j', job)
        redis.call('HINCRBY', KEYS[2], user, 1)
        n = n + 1
      end
      if head >= tail then
        redis.call('HDEL', KEYS[4], 'h ' .. user, f)
        tail = nil
      end
    end
    moved = moved + n
  end
end
return moved
`,
);
