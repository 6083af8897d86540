import { script, type ScriptDef } from "../script.js";

/**
 * Creates a subscription, or returns the one with the same (emitter, listener, channel) triple
 * (with its filter replaced when ARGV[7] is not ""),
 * checking two limits in the same atomic step: the user's subscription count, and how many
 * subscriptions one event of the emitter on this channel would match (the exact emitter's index
 * set plus its glob's, which is what fan-out reads). Two creates racing for the last slot cannot
 * both win; re-posting an existing triple at the limit still answers with it.
 *
 * The counts are the sets themselves (ZCARD of the list, SCARD of the index sets), so data written
 * before limits existed counts, and a deletion frees its slot with nothing else to keep in step.
 *
 * KEYS[1] triples (hash: "emitter\nlistener\nchannel" -> id), KEYS[2] records (hash: id -> JSON),
 *   KEYS[3] list (zset: id by creation time), KEYS[4] the emitter's index set on the channel,
 *   KEYS[5] the index set of the emitter's glob on the channel (KEYS[4] again when the emitter is
 *   itself a glob or has none); all under the user's hash tag.
 * ARGV[1] triple, ARGV[2] new id, ARGV[3] record JSON (with the new id), ARGV[4] score (ms),
 *   ARGV[5] most subscriptions (0 = unlimited), ARGV[6] most subscriptions one event may match
 *   (0 = unlimited), ARGV[7] the filter's JSON text for an existing triple ("null" clears it, "" keeps it).
 *
 * The filter is swapped as text, not through cjson (which turns [] into {}): records are written
 * with `filter` as their last key, and `,"filter":` cannot occur unescaped inside the string values
 * before it, so its first occurrence starts the filter (records older than filters have none: the
 * key is appended before their closing brace).
 * Returns {"existing", JSON}, {"subscriptions", n} or {"listeners", n} (at that limit, nothing
 * written), or {"created", JSON}.
 */
export const SUBSCRIPTION_CREATE: ScriptDef = script(
  "tribCreateSub",
  5,
  `
local id = redis.call('HGET', KEYS[1], ARGV[1])
if id then
  local rec = redis.call('HGET', KEYS[2], id)
  if rec then
    if ARGV[7] ~= '' then
      local at = string.find(rec, ',"filter":', 1, true)
      local head = at and string.sub(rec, 1, at - 1) or string.sub(rec, 1, -2)
      rec = head .. ',"filter":' .. ARGV[7] .. '}'
      redis.call('HSET', KEYS[2], id, rec)
    end
    return {'existing', rec}
  end
end
local n = redis.call('ZCARD', KEYS[3])
local maxSubs = tonumber(ARGV[5])
if maxSubs > 0 and n >= maxSubs then return {'subscriptions', tostring(n)} end
local listeners = redis.call('SCARD', KEYS[4])
if KEYS[5] ~= KEYS[4] then listeners = listeners + redis.call('SCARD', KEYS[5]) end
local maxListeners = tonumber(ARGV[6])
if maxListeners > 0 and listeners >= maxListeners then return {'listeners', tostring(listeners)} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
return {'created', ARGV[3]}
`,
);
