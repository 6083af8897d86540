import { script, type ScriptDef } from "../script.js";

/**
 * Replaces a delivery record only if it is still the one the caller read, compared by SHA-1 so
 * the record (and its payload) does not travel twice: the compare-and-set that makes a replay
 * claim a failed delivery at most once, whoever else (another replay, a single retry) races it.
 * KEYS[1] the record; ARGV[1] the SHA-1 (hex) of the value read, ARGV[2] the new value. Returns 1
 * when written, 0 when the record changed or vanished meanwhile.
 */
export const CLAIM_DELIVERY: ScriptDef = script(
  "tribClaimDelivery",
  1,
  `
local current = redis.call('GET', KEYS[1])
if not current or redis.sha1hex(current) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
`,
);
