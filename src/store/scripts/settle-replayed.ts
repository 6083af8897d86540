import { script, type ScriptDef } from "../script.js";

/**
 * Writes the record of a replayed delivery that just settled (delivered or failed) and counts the
 * outcome in its replay, in one step: the replay's outcome sets hold delivery ids, so a repeated
 * write counts once, and a delivery found failed then delivered moves from one set to the other.
 * Nothing is counted once the replay expired (its record is gone): the sets never outlive it.
 *
 * KEYS[1] the delivery record, KEYS[2] the replay's record (hash), KEYS[3] the replay's set of
 * this outcome, KEYS[4] the set of the other outcome; ARGV[1] the record JSON, ARGV[2] the
 * delivery id. Returns 1 when the record was written (it still existed), else 0.
 */
export const SETTLE_REPLAYED: ScriptDef = script(
  "tribSettleReplayed",
  4,
  `
if not redis.call('SET', KEYS[1], ARGV[1], 'XX') then return 0 end
local ttl = redis.call('PTTL', KEYS[2])
if ttl > 0 then
  redis.call('SADD', KEYS[3], ARGV[2])
  redis.call('SREM', KEYS[4], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 1
`,
);
