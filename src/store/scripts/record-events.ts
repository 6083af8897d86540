import { script, type ScriptDef } from "../script.js";
import { TAKE_TOKENS_LUA } from "./token-bucket.js";

/**
 * The one atomic step that makes events durable (ARCHITECTURE "record"): append each event to the
 * emitter's summary stream, trimmed to exactly the latest 100, and to the outbox of the user's
 * shard that fan-out workers read (`keys.outboxOf`: in the user's slot, so this stays one script
 * on a Redis Cluster). Once this returns, the caller may acknowledge; a crash afterwards loses nothing.
 *
 * An event nobody listens to does not go to the outbox: when neither of the subscription index
 * sets that fan-out would look up (exact emitter and its glob, on this channel) exists, only the
 * summary is written. This is the same decision fan-out would take, made atomically with the
 * record, so a subscription created after the script ran applies from the next event on.
 *
 * KEYS[1] summary stream, KEYS[2] the user's shard outbox stream, KEYS[3] set of the emitter's channels, KEYS[4]
 * and KEYS[5] the exact and glob subscription index sets (the same key twice when the emitter has
 * no glob), KEYS[6] a key that must exist (the workflow record) unless it repeats KEYS[1]: when it
 * is missing nothing is written and the script returns nil, so the caller registers the workflow
 * first (one round trip per emit instead of a registration transaction plus the script). Without
 * a guard KEYS[6] repeats KEYS[1] (the key count is fixed; a guard is never a summary stream).
 * KEYS[7] the user's ingress token bucket, charged ARGV[7] tokens (every event of the request) in
 * the same step, once the guard passed: when the bucket cannot pay, nothing is recorded and the
 * script returns the milliseconds until it can (an integer, not a list). ARGV[7] "0" charges
 * nothing (KEYS[7] then repeats KEYS[1]).
 * ARGV[1] user id, ARGV[2] emitter id, ARGV[3] channel, ARGV[4] accepted-at ms (also the bucket's
 * clock), ARGV[5] hops, ARGV[6] emitter kind, ARGV[7] tokens to charge, ARGV[8] the bucket's rate
 * (tokens per second), ARGV[9] its burst, then pairs (summary record JSON, payload JSON) per event.
 * Nothing the script can derive is passed: each argument costs the daemon about 0.15 µs for
 * ioredis to build and measure (docs/decisions.md "Single-emit ingest cost, second pass").
 * Returns the event ids in order.
 *
 * The outbox entry's fields (`u,e,c,i,t,h,k,p`) are the wire format `events/outbox.ts` documents and
 * parses; change both together (test/unit/outbox.test.ts checks that they agree).
 */
export const RECORD_EVENTS: ScriptDef = script(
  "tribRecordEvents",
  7,
  `${TAKE_TOKENS_LUA}
if KEYS[6] ~= KEYS[1] and redis.call('EXISTS', KEYS[6]) == 0 then return false end
local cost = tonumber(ARGV[7])
if cost > 0 then
  local wait = take_tokens(KEYS[7], tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[4]), cost)
  if wait > 0 then return wait end
end
local listened = redis.call('EXISTS', KEYS[4], KEYS[5]) > 0
local ids = {}
redis.call('SADD', KEYS[3], ARGV[3])
for i = 10, #ARGV, 2 do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '=', 100, '*', 'r', ARGV[i])
  if listened then
    redis.call('XADD', KEYS[2], '*', 'u', ARGV[1], 'e', ARGV[2], 'c', ARGV[3], 'i', id, 't', ARGV[4], 'h', ARGV[5], 'k', ARGV[6], 'p', ARGV[i + 1])
  end
  ids[#ids + 1] = id
end
return ids
`,
);
