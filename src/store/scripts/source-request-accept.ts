import { script, type ScriptDef } from "../script.js";
import { QUOTA_GATE_LUA } from "./quota-gate.js";
import { RUN_PUT_LUA } from "./run-stream-add.js";
import { TAKE_TOKENS_LUA } from "./token-bucket.js";

/**
 * A queued HTTP source request in one step (runtime/source-requests.ts): the source's rate, then
 * its user's ingress rate (as store/scripts/source-request-rate.ts), then the user's quota (free
 * users), and only when all three let it through, the run goes into the user's shard's run stream
 * (`run_put`: in the stream, or parked past the user's share). One round trip answers the request;
 * a refused request adds nothing (a request refused by the ingress rate has spent its source token,
 * as when the two are taken one after the other).
 *
 * KEYS[1] the source's bucket, KEYS[2] the user's ingress bucket, KEYS[3] the user's usage hash of
 * the day, KEYS[4] the shard's run stream, KEYS[5] its per-user counts, KEYS[6] its parked runs,
 * KEYS[7] its parked ends: all in the user's shard's slot.
 * ARGV[1] the source rate (tokens per second), ARGV[2] its burst, ARGV[3] now (ms), ARGV[4] the
 *   ingress rate ("" when unlimited: the second bucket is not touched), ARGV[5] its burst,
 *   ARGV[6] the ingress cost, ARGV[7] daily invocations ("" for a paid user: no quota here),
 *   ARGV[8] daily compute ms, ARGV[9] the user's entries in the stream at most, ARGV[10] user id,
 *   ARGV[11] job JSON.
 * Returns {source wait ms, ingress wait ms, quota (0 ok, 1 invocations, 2 compute time), run
 * (1 in the stream, 2 parked, 0 not added)}.
 */
export const SOURCE_REQUEST_ACCEPT: ScriptDef = script(
  "tribSourceRequestAccept",
  7,
  `${TAKE_TOKENS_LUA}${QUOTA_GATE_LUA}${RUN_PUT_LUA}
local now = tonumber(ARGV[3])
local wait = take_tokens(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), now, 1)
if wait > 0 then return {wait, 0, 0, 0} end
if ARGV[4] ~= '' then
  local charged = take_tokens(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), now, tonumber(ARGV[6]))
  if charged > 0 then return {0, charged, 0, 0} end
end
if ARGV[7] ~= '' then
  local over = quota_gate(KEYS[3], tonumber(ARGV[7]), tonumber(ARGV[8]))
  if over > 0 then return {0, 0, over, 0} end
end
return {0, 0, 0, run_put(KEYS[4], KEYS[5], KEYS[6], KEYS[7], tonumber(ARGV[9]), ARGV[10], ARGV[11])}
`,
);
