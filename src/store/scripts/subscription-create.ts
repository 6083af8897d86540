import { script, type ScriptDef } from "../script.js";

/**
 * Creates a subscription, or returns the one with the same (emitter, listener, channel) triple,
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
 *   (0 = unlimited).
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
  if rec then return {'existing', rec} end
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
