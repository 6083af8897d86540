/**
 * The one atomic step that makes events durable (ARCHITECTURE "record"): append each event to the
 * emitter's summary stream, trimmed to exactly the latest 100, and to the outbox that fan-out
 * workers read. Once this returns, the caller may acknowledge; a crash afterwards loses nothing.
 *
 * KEYS[1] summary stream, KEYS[2] outbox stream, KEYS[3] set of the emitter's channels,
 * optional KEYS[4] a key that must exist (the workflow record): when it is missing nothing is
 * written and the script returns nil, so the caller registers the workflow first (one round trip
 * per emit instead of a registration transaction plus the script).
 * ARGV[1] user id, ARGV[2] emitter id, ARGV[3] channel, ARGV[4] accepted-at ms, ARGV[5] hops,
 * ARGV[6] emitter kind, then pairs (summary record JSON, payload JSON) per event.
 * Returns the event ids in order.
 */
export const RECORD_EVENTS_LUA = `
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 0 then return false end
local ids = {}
redis.call('SADD', KEYS[3], ARGV[3])
for i = 7, #ARGV, 2 do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '=', 100, '*', 'r', ARGV[i])
  redis.call('XADD', KEYS[2], '*', 'u', ARGV[1], 'e', ARGV[2], 'c', ARGV[3], 'i', id, 't', ARGV[4], 'h', ARGV[5], 'k', ARGV[6], 'p', ARGV[i + 1])
  ids[#ids + 1] = id
end
return ids
`;
