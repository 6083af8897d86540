import { script, type ScriptDef } from "../script.js";

/**
 * Moves a replay's cursor past a chunk of its plan and counts the chunk, only if the cursor is
 * still where the driver read it: a driver that lost its lease while stalled cannot count a chunk
 * twice. When the cursor reaches the end, the "identical replay running" marker is dropped if it
 * still names this replay (a later identical request then plans anew).
 *
 * KEYS[1] the replay's record (hash), KEYS[2] the marker; ARGV[1] the cursor read, ARGV[2]
 * entries of the plan examined, ARGV[3] of them queued, ARGV[4] skipped, ARGV[5] the replay id.
 * Returns the new cursor, or -1 when the cursor had moved (or the replay expired).
 */
export const REPLAY_ADVANCE: ScriptDef = script(
  "tribReplayAdvance",
  2,
  `
local cursor = redis.call('HGET', KEYS[1], 'cursor')
if not cursor or cursor ~= ARGV[1] then return -1 end
local next = redis.call('HINCRBY', KEYS[1], 'cursor', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'queued', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'skipped', ARGV[4])
if next >= tonumber(redis.call('HGET', KEYS[1], 'matched')) and redis.call('GET', KEYS[2]) == ARGV[5] then
  redis.call('DEL', KEYS[2])
end
return next
`,
);
