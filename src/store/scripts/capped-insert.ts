import { script, type ScriptDef } from "../script.js";

/**
 * Writes a record and its entry in the user's list (a sorted set) unless the list is full: the
 * check and the write are one atomic step, so two creates racing for the last slot cannot both
 * win. The list itself is the count (ZCARD), so records made before limits existed count too and
 * a deletion (ZREM) frees its slot with nothing else to keep in step.
 *
 * KEYS[1] the record (a string key), KEYS[2] the user's list (zset: id by creation time); both
 *   under the user's hash tag.
 * ARGV[1] id, ARGV[2] score (creation time, ms), ARGV[3] record JSON, ARGV[4] the most entries the
 *   list may hold (0 = unlimited).
 * Returns {status, count}: status 1 written; 0 the record already existed (nothing overwritten,
 * only a missing list entry is restored, ZADD NX); -1 the list is full (nothing written). `count`
 * is the list's size afterwards.
 */
export const CAPPED_INSERT: ScriptDef = script(
  "tribCappedInsert",
  2,
  `
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
  return {0, redis.call('ZCARD', KEYS[2])}
end
local n = redis.call('ZCARD', KEYS[2])
local max = tonumber(ARGV[4])
if max > 0 and n >= max and not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return {-1, n}
end
redis.call('SET', KEYS[1], ARGV[3])
n = n + redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
return {1, n}
`,
);
