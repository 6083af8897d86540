import { script, type ScriptDef } from "../script.js";
import { RUN_PUT_LUA } from "./run-stream-add.js";
import { ADMIT_REQUEST_LUA } from "./source-request-admit.js";

/**
 * A queued HTTP source request in one step (runtime/source-requests.ts): `admit_request` (the
 * source's rate, the user's ingress rate, a free user's quota), and only when it lets the request
 * through, the run goes into the user's shard's run stream (`run_put`: in the stream, or parked
 * past the user's share). One round trip answers the request; a refused request adds nothing.
 *
 * KEYS[1] the source's bucket, KEYS[2] the user's ingress bucket, KEYS[3] the user's usage hash of
 * the day, KEYS[4] the shard's run stream, KEYS[5] its per-user counts, KEYS[6] its parked runs,
 * KEYS[7] its parked ends: all in the user's shard's slot.
 * ARGV[1..8] as store/scripts/source-request-admit.ts, ARGV[9] the user's entries in the stream at
 * most, ARGV[10] user id, ARGV[11] job JSON.
 * Returns {source wait ms, ingress wait ms, quota (0 ok, 1 invocations, 2 compute time), run
 * (1 in the stream, 2 parked, 0 not added)}.
 */
export const SOURCE_REQUEST_ACCEPT: ScriptDef = script(
  "tribSourceRequestAccept",
  7,
  `${ADMIT_REQUEST_LUA}${RUN_PUT_LUA}
local wait, charged, over = admit_request(KEYS[1], KEYS[2], KEYS[3], ARGV)
if wait > 0 or charged > 0 or over > 0 then return {wait, charged, over, 0} end
return {0, 0, 0, run_put(KEYS[4], KEYS[5], KEYS[6], KEYS[7], tonumber(ARGV[9]), ARGV[10], ARGV[11])}
`,
);
