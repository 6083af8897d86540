import { script, type ScriptDef } from "../script.js";
import { QUOTA_GATE_LUA } from "./quota-gate.js";
import { TAKE_TOKENS_LUA } from "./token-bucket.js";

/**
 * What lets an HTTP source request through, as a Lua function shared by this script and the queued
 * request's accept script (store/scripts/source-request-accept.ts), in the order the endpoint
 * applies them: the source's rate, then (only once that one paid) its user's ingress rate, then (a
 * free user) the day's quota. A request refused by the ingress rate has spent its source token, as
 * when the two were taken one after the other.
 * `admit_request(source_bucket, ingress_bucket, usage, argv)` reads ARGV[1..8] (below) and returns
 * source wait ms, ingress wait ms, quota (0 ok, 1 invocations reached, 2 compute time reached):
 * all 0 when admitted.
 */
export const ADMIT_REQUEST_LUA = `${TAKE_TOKENS_LUA}${QUOTA_GATE_LUA}
local function admit_request(source_bucket, ingress_bucket, usage, argv)
  local now = tonumber(argv[3])
  local wait = take_tokens(source_bucket, tonumber(argv[1]), tonumber(argv[2]), now, 1)
  if wait > 0 then return wait, 0, 0 end
  if argv[4] ~= '' then
    local charged = take_tokens(ingress_bucket, tonumber(argv[4]), tonumber(argv[5]), now, tonumber(argv[6]))
    if charged > 0 then return 0, charged, 0 end
  end
  if argv[7] ~= '' then
    local over = quota_gate(usage, tonumber(argv[7]), tonumber(argv[8]))
    if over > 0 then return 0, 0, over end
  end
  return 0, 0, 0
end
`;

/**
 * An HTTP source request's rates and quota in one step (a request answered by its run: it is not
 * queued, so nothing else is written). KEYS and ARGV[1..8] are `admit_request`'s:
 * KEYS[1] the source's bucket, KEYS[2] the user's ingress bucket, KEYS[3] the user's usage hash of
 * the day (all in the user's shard's slot).
 * ARGV[1] the source rate (tokens per second), ARGV[2] its burst, ARGV[3] now (ms), ARGV[4] the
 *   ingress rate ("" when unlimited: the second bucket is not touched), ARGV[5] its burst,
 *   ARGV[6] the ingress cost, ARGV[7] daily invocations ("" for a paid user: no quota here),
 *   ARGV[8] daily compute ms.
 * Returns {source wait ms, ingress wait ms, quota}: all 0 when admitted.
 */
export const SOURCE_REQUEST_ADMIT: ScriptDef = script(
  "tribSourceRequestAdmit",
  3,
  `${ADMIT_REQUEST_LUA}
local wait, charged, over = admit_request(KEYS[1], KEYS[2], KEYS[3], ARGV)
return {wait, charged, over}
`,
);
