import { script, type ScriptDef } from "../script.js";

/**
 * Counts one source run in a usage hash, in one command (so it travels in the same write as the
 * run's other commands). KEYS[1] the hash (a free user's day, or a paid user's billing period);
 * ARGV[1] invocations to add, ARGV[2] compute ms to add ("" adds none), ARGV[3] the key's time to
 * live in seconds. Returns nothing.
 */
export const USAGE_COUNT: ScriptDef = script(
  "tribUsageCount",
  1,
  `
local inv = tonumber(ARGV[1])
if inv > 0 then redis.call('HINCRBY', KEYS[1], 'invocations', inv) end
if ARGV[2] ~= '' then redis.call('HINCRBYFLOAT', KEYS[1], 'compute_ms', ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 0
`,
);
