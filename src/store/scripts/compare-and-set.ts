import { script, type ScriptDef } from "../script.js";

/**
 * Sets KEYS[1] to ARGV[2] only if it still holds ARGV[1] ("" standing for "absent"): a
 * compare-and-set, so a read-modify-write that lost a race is redone instead of overwriting.
 * KEYS[1] the value's key; ARGV[1] the value read (or ""), ARGV[2] the new value; optionally
 * ARGV[3] a pub/sub channel and ARGV[4] a message published in the same step when the value is
 * written (cache invalidation). Returns 1 when written, 0 when the value had changed.
 */
export const COMPARE_AND_SET: ScriptDef = script(
  "tribCompareAndSet",
  1,
  `
local current = redis.call('GET', KEYS[1])
if (current == false and ARGV[1] == '') or current == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  if ARGV[3] then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
  return 1
end
return 0
`,
);
