import { script, type ScriptDef } from "../script.js";

/**
 * Creates an auto-subscription, or returns the user's existing one with the same listener and
 * channel, unless the user already has as many as allowed: one atomic step (two identical posts
 * agree on one record; two creates racing for the last slot cannot both win). The count is the
 * hash itself (HLEN), so records made before limits existed count too.
 *
 * KEYS[1] the user's auto-subscriptions (hash: id -> JSON {id, listener_id, event_name}).
 * ARGV[1] listener id, ARGV[2] channel as stored ("" for the default channel, which "default"
 *   also names), ARGV[3] new id, ARGV[4] record JSON, ARGV[5] most auto-subscriptions (0 =
 *   unlimited).
 * Returns {"existing", JSON}, {"limit", n} (nothing written) or {"created", JSON}.
 */
export const AUTO_SUBSCRIPTION_CREATE: ScriptDef = script(
  "tribCreateAutoSub",
  1,
  `
for _, raw in ipairs(redis.call('HVALS', KEYS[1])) do
  local ok, rec = pcall(cjson.decode, raw)
  if ok and type(rec) == 'table' and rec.listener_id == ARGV[1] then
    local name = rec.event_name
    if type(name) ~= 'string' or name == 'default' then name = '' end
    if name == ARGV[2] then return {'existing', raw} end
  end
end
local n = redis.call('HLEN', KEYS[1])
local max = tonumber(ARGV[5])
if max > 0 and n >= max then return {'limit', tostring(n)} end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return {'created', ARGV[4]}
`,
);
