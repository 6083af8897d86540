import { script, type ScriptDef } from "../script.js";
import { BUCKET_STEPS_LUA } from "./token-bucket.js";

/**
 * The one atomic step that makes events durable (ARCHITECTURE "record"): append each event to the
 * emitter's summary stream, trimmed to exactly the latest 100, and to the outbox of the user's
 * shard that fan-out workers read (`keys.outboxOf`: in the user's slot, so this stays one script
 * on a Redis Cluster). Once this returns, the caller may acknowledge; a crash afterwards loses nothing.
 *
 * One call records one or more *requests* to the same stream (store/record-groups.ts gathers the
 * requests of one event-loop turn that share every key): each request is charged and recorded
 * whole or not at all, in order, as if each were a call of its own.
 *
 * An event nobody listens to does not go to the outbox: when neither of the subscription index
 * sets that fan-out would look up (exact emitter and its glob, on this channel) exists, only the
 * summary is written. This is the same decision fan-out would take, made atomically with the
 * record, so a subscription created after the script ran applies from the next event on.
 *
 * KEYS[1] summary stream, KEYS[2] the user's shard outbox stream, KEYS[3] set of the emitter's channels, KEYS[4]
 * and KEYS[5] the exact and glob subscription index sets (the same key twice when the emitter has
 * no glob), KEYS[6] a key that must exist (the workflow record) unless it repeats KEYS[1]: when it
 * is missing nothing is written and the script returns nil, so the callers register the workflow
 * first (one round trip per emit instead of a registration transaction plus the script). Without
 * a guard KEYS[6] repeats KEYS[1] (the key count is fixed; a guard is never a summary stream).
 * KEYS[7] the user's ingress token bucket, charged each request's tokens (every event of the
 * request) once the guard passed; a request the bucket cannot pay records nothing. A request that
 * charges nothing ("0") does not touch it (KEYS[7] then repeats KEYS[1] when no request charges).
 * The call takes every request's charge first, in order, on one read and one write of the bucket
 * (token-bucket.ts), then records the requests that could pay, in order; its last event's XADD
 * trims the summary stream to exactly the latest 100 (one trim per call, not per event).
 * ARGV[1] user id, ARGV[2] emitter id, ARGV[3] channel, ARGV[4] emitter kind, ARGV[5] the bucket's
 * rate (tokens per second), ARGV[6] its burst; then per request four arguments: its accepted-at ms
 * (the outbox's `t`, and the bucket's clock), hops, tokens to charge, its number of events n; then
 * n pairs (summary record JSON, payload JSON).
 * Nothing the script can derive is passed: each argument costs the daemon about 0.15 µs for
 * ioredis to build and measure (docs/decisions.md "Single-emit ingest cost, second pass").
 * Returns one reply per request, in order: the list of its event ids, or (an integer) the
 * milliseconds until the bucket could pay for it.
 *
 * The outbox entry's fields (`u,e,c,i,t,h,k,p`) are the wire format `events/outbox.ts` documents and
 * parses; change both together (test/unit/outbox.test.ts checks that they agree).
 */
export const RECORD_EVENTS: ScriptDef = script(
  "tribRecordEvents",
  7,
  `${BUCKET_STEPS_LUA}
if KEYS[6] ~= KEYS[1] and redis.call('EXISTS', KEYS[6]) == 0 then return false end
local rate, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local listened = redis.call('EXISTS', KEYS[4], KEYS[5]) > 0
-- First every request's charge, in order, on one read and one write of the bucket; then the records.
local starts, waits = {}, {}
local bucket = nil
local h = 7
while h <= #ARGV do
  starts[#starts + 1] = h
  local cost = tonumber(ARGV[h + 2])
  local wait = 0
  if cost > 0 then
    if bucket == nil then bucket = bucket_open(KEYS[7], burst, tonumber(ARGV[h])) end
    wait = bucket_take(bucket, rate, burst, tonumber(ARGV[h]), cost)
  end
  waits[#waits + 1] = wait
  h = h + 4 + 2 * tonumber(ARGV[h + 3])
end
if bucket ~= nil then bucket_close(KEYS[7], bucket, rate, burst) end
-- The call's last event trims the summary stream to exactly its latest 100, for all of the call's
-- events at once (a trim per event cost a fifth of a four-request call).
local lastPaying = 0
for r = 1, #starts do
  if waits[r] == 0 and tonumber(ARGV[starts[r] + 3]) > 0 then lastPaying = r end
end
local channelSeen = false
local replies = {}
for r = 1, #starts do
  if waits[r] > 0 then
    replies[r] = waits[r]
  else
    if not channelSeen then
      redis.call('SADD', KEYS[3], ARGV[3])
      channelSeen = true
    end
    h = starts[r]
    local ids = {}
    local last = h + 3 + 2 * tonumber(ARGV[h + 3])
    for i = h + 4, last, 2 do
      local id
      if r == lastPaying and i == last - 1 then
        id = redis.call('XADD', KEYS[1], 'MAXLEN', '=', 100, '*', 'r', ARGV[i])
      else
        id = redis.call('XADD', KEYS[1], '*', 'r', ARGV[i])
      end
      if listened then
        redis.call('XADD', KEYS[2], '*', 'u', ARGV[1], 'e', ARGV[2], 'c', ARGV[3], 'i', id, 't', ARGV[h], 'h', ARGV[h + 1], 'k', ARGV[4], 'p', ARGV[i + 1])
      end
      ids[#ids + 1] = id
    end
    replies[r] = ids
  end
end
return replies
`,
);
