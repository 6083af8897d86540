import { script, type ScriptDef } from "../script.js";

/**
 * Saves a component unless the user already has one with the same code hash, or the user's
 * component count or stored bytes would go over their limit: one atomic step, so concurrent
 * identical posts agree on one component and concurrent creates cannot pass a limit together.
 *
 * The count is the user's component list (ZCARD). The bytes are the sum of the per-component sizes
 * hash (id -> bytes of the stored record plus the compiled bundle, i.e. the STRLEN of the two
 * values); components are never changed after they are saved, so each size is fixed.
 *
 * KEYS[1] by-hash index (hash: code hash -> id), KEYS[2] the user's components (zset), KEYS[3]
 *   sizes (hash: id -> bytes), KEYS[4] the new component's record, KEYS[5] its compiled bundle,
 *   KEYS[6] by-key index (hash: key -> id, newest wins); all under the user's hash tag.
 * ARGV[1] code hash, ARGV[2] new id, ARGV[3] score (ms), ARGV[4] record JSON, ARGV[5] compiled
 *   code, ARGV[6] component key ("" for none), ARGV[7] most components (0 = unlimited), ARGV[8]
 *   most bytes (0 = unlimited), ARGV[9] an id whose by-hash claim may be taken over (its record is
 *   gone), else "".
 * Returns {"existing", id}: the hash is claimed by `id` (nothing written); {"count", n}: n
 * components already, at the limit; {"bytes", used}: the new one does not fit in the bytes left;
 * {"created", id}.
 */
export const COMPONENT_SAVE: ScriptDef = script(
  "tribComponentSave",
  6,
  `
local claimed = redis.call('HGET', KEYS[1], ARGV[1])
if claimed and claimed ~= ARGV[9] then return {'existing', claimed} end
local n = redis.call('ZCARD', KEYS[2])
local maxCount = tonumber(ARGV[7])
if maxCount > 0 and n >= maxCount then return {'count', tostring(n)} end
local size = string.len(ARGV[4]) + string.len(ARGV[5])
local maxBytes = tonumber(ARGV[8])
if maxBytes > 0 then
  local used = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[3])) do used = used + (tonumber(v) or 0) end
  if used + size > maxBytes then return {'bytes', tostring(used)} end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[4], ARGV[4])
redis.call('SET', KEYS[5], ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], size)
if ARGV[6] ~= '' then redis.call('HSET', KEYS[6], ARGV[6], ARGV[2]) end
return {'created', ARGV[2]}
`,
);
