import { script, type ScriptDef } from "../script.js";

/**
 * The subscriptions fan-out delivers an event to: the union of the exact and glob index sets, and
 * their records. KEYS[1] the user's subscription records hash, KEYS[2] the exact index set, KEYS[3]
 * the glob index set (KEYS[2] again when the emitter has no glob), all under the user's hash tag.
 * No ARGV. Returns the records (nil for an id whose record is gone).
 */
export const MATCH_SUBSCRIPTIONS: ScriptDef = script(
  "tribMatchSubs",
  3,
  `
local ids = redis.call('SUNION', KEYS[2], KEYS[3])
local out = {}
for i = 1, #ids, 1000 do
  local part = redis.call('HMGET', KEYS[1], unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #part do out[#out + 1] = part[j] end
end
return out
`,
);
