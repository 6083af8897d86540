import { script, type ScriptDef } from "../script.js";

/**
 * Deletes events of one summary stream and gives their bytes back to the user's storage budget
 * (store/scripts/record-events.ts keeps it): the whole stream (its key, its channel in the
 * emitter's set and its field in the stored-streams hash, so it no longer counts as one of the
 * user's streams), or the entries of an inclusive id range (their summary records' lengths leave
 * the stream's and the user's byte counts, never below zero). In one step, so a record running
 * at the same time is counted either before or after.
 *
 * KEYS[1] the summary stream, KEYS[2] the emitter's set of channels, KEYS[3] the user's
 * stored-streams hash. ARGV[1] the channel (stored form), ARGV[2] the stream's field in KEYS[3]
 * (`<emitter id>:<channel>`), ARGV[3] and ARGV[4] the first and last ids of the range ("-" and "+"
 * for open ends); both "" delete the whole stream.
 * Returns how many keys (whole stream) or entries (range) were deleted.
 */
export const DELETE_STREAM_EVENTS: ScriptDef = script(
  "tribDeleteStreamEvents",
  3,
  `
local held = tonumber(redis.call('HGET', KEYS[3], ARGV[2]))
local freed, deleted = 0, 0
if ARGV[3] == '' and ARGV[4] == '' then
  deleted = redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[1])
  if held then
    redis.call('HDEL', KEYS[3], ARGV[2])
    freed = held
  end
else
  local entries = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[4])
  local ids, bytes = {}, 0
  for i = 1, #entries do
    ids[i] = entries[i][1]
    bytes = bytes + #(entries[i][2][2] or '')
  end
  for i = 1, #ids, 500 do
    deleted = deleted + redis.call('XDEL', KEYS[1], unpack(ids, i, math.min(i + 499, #ids)))
  end
  if held then
    freed = math.min(held, bytes)
    redis.call('HSET', KEYS[3], ARGV[2], string.format('%d', held - freed))
  end
end
if freed > 0 then redis.call('HINCRBY', KEYS[3], 'bytes', -freed) end
-- Only the sum is left: no stream holds anything.
if redis.call('HLEN', KEYS[3]) == 1 then redis.call('DEL', KEYS[3]) end
return deleted
`,
);
