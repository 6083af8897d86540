import { script, type ScriptDef } from "../script.js";

/**
 * A free user's daily quota (SPEC §5) as a Lua function, shared by this script and the source
 * request's accept script (store/scripts/source-request-accept.ts), so the rule has one home:
 * `quota_gate(usage, invocations, compute_ms)` reads the user's day counters (hash {invocations,
 * compute_ms}) and returns 0 while both are under their limits, 1 once the invocations reached
 * theirs, 2 once the compute time did.
 */
export const QUOTA_GATE_LUA = `
local function quota_gate(usage, max_invocations, max_compute_ms)
  local used = redis.call('HMGET', usage, 'invocations', 'compute_ms')
  if (tonumber(used[1]) or 0) >= max_invocations then return 1 end
  if (tonumber(used[2]) or 0) >= max_compute_ms then return 2 end
  return 0
end
`;

/**
 * A free user's quota check (runtime/quotas.ts): `quota_gate` on its own.
 * KEYS[1] the user's usage hash of the day. ARGV[1] daily invocations, ARGV[2] daily compute ms.
 * Returns 0 (under both), 1 (invocations reached) or 2 (compute time reached).
 */
export const QUOTA_CHECK: ScriptDef = script(
  "tribQuotaCheck",
  1,
  `${QUOTA_GATE_LUA}
return quota_gate(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
`,
);
