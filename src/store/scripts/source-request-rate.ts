import { script, type ScriptDef } from "../script.js";
import { TAKE_TOKENS_LUA } from "./token-bucket.js";

/**
 * An HTTP source request's two token buckets in one step, in the order the endpoint applies them:
 * the source's rate, then (only once that one paid) its user's ingress rate. A request refused by
 * the ingress rate has spent its source token, as when the two were taken one after the other.
 *
 * KEYS[1] the source's bucket, KEYS[2] the user's ingress bucket (same hash tag).
 * ARGV[1] the source rate (tokens per second), ARGV[2] its burst, ARGV[3] now (ms), ARGV[4] the
 *   ingress rate ("" when unlimited: the second bucket is not touched), ARGV[5] its burst,
 *   ARGV[6] the ingress cost.
 * Returns {source wait ms, ingress wait ms}: both 0 when admitted.
 */
export const SOURCE_REQUEST_RATE: ScriptDef = script(
  "tribSourceRequestRate",
  2,
  `${TAKE_TOKENS_LUA}
local now = tonumber(ARGV[3])
local wait = take_tokens(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), now, 1)
if wait > 0 or ARGV[4] == '' then return {wait, 0} end
return {0, take_tokens(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), now, tonumber(ARGV[6]))}
`,
);
