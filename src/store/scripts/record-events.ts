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
 * rate (tokens per second), ARGV[6] its burst, ARGV[7] and ARGV[8] the storage limits (below); then
 * per request four arguments: its accepted-at ms
 * (the outbox's `t`, and the bucket's clock), hops, tokens to charge, its number of events n; then
 * n pairs (summary record JSON, payload JSON).
 * Nothing the script can derive is passed: each argument costs the daemon about 0.15 µs for
 * ioredis to build and measure (docs/decisions.md "Single-emit ingest cost, second pass").
 * KEYS[8] the user's stored-streams hash (`keys.storedStreams`: a field per stream holding the
 * bytes of its events, and `bytes`, their sum). Every call keeps it exact for the summary stream:
 * each event adds the length of its summary record, and each one the trim drops takes its own
 * length back (read before the XADDs: the oldest of the stream, as many as the call can push out).
 * ARGV[7] the most streams the user may have (0 = no limit): a call that would create the user's
 * next stream past it records nothing; ARGV[8] the most bytes they may hold (0 = no limit): a
 * request that would grow them past it records nothing (one that replaces at least as many bytes
 * as it adds is recorded however much is held). Neither refusal takes the request's charge.
 * Streams recorded before this accounting existed are counted from their next record on, and the
 * events they held then are not taken back when the trim drops them (never below zero).
 * Returns one reply per request, in order: the list of its event ids, (an integer) the
 * milliseconds until the bucket could pay for it, or a status naming the limit that refused it:
 * `streams <streams held> <limit>` or `stored_bytes <bytes held> <bytes it would add> <limit>`.
 *
 * The outbox entry's fields (`u,e,c,i,t,h,k,p`) are the wire format `events/outbox.ts` documents and
 * parses; change both together (test/unit/outbox.test.ts checks that they agree).
 */
export const RECORD_EVENTS: ScriptDef = script(
  "tribRecordEvents",
  8,
  `${BUCKET_STEPS_LUA}
if KEYS[6] ~= KEYS[1] and redis.call('EXISTS', KEYS[6]) == 0 then return false end
local rate, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local maxStreams, maxBytes = tonumber(ARGV[7]), tonumber(ARGV[8])
local starts = {}
local events = 0
local h = 9
while h <= #ARGV do
  starts[#starts + 1] = h
  events = events + tonumber(ARGV[h + 3])
  h = h + 4 + 2 * tonumber(ARGV[h + 3])
end
-- What the user's streams hold; a stream without its field is new (or from before the accounting).
local field = ARGV[2] .. ':' .. ARGV[3]
local held = redis.call('HMGET', KEYS[8], field, 'bytes')
local streamBytes = tonumber(held[1])
local stored = tonumber(held[2]) or 0
local fresh = streamBytes == nil
if fresh then
  streamBytes = 0
  if maxStreams > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
    local streams = redis.call('HLEN', KEYS[8])
    if held[2] then streams = streams - 1 end
    if streams >= maxStreams then
      local replies = {}
      for r = 1, #starts do replies[r] = redis.status_reply('streams ' .. streams .. ' ' .. ARGV[7]) end
      return replies
    end
  end
end
-- The lengths of the oldest entries the call's events can push out of the latest 100.
local len = redis.call('XLEN', KEYS[1])
local dropped = {}
local reach = math.min(len, len + events - 100)
if reach > 0 then
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', reach)
  for i = 1, #oldest do dropped[i] = #(oldest[i][2][2] or '') end
end
local listened = redis.call('EXISTS', KEYS[4], KEYS[5]) > 0
-- Each request in order: its storage verdict, then its charge (on one read and one write of the
-- bucket). The trim is simulated per request (what the final trim to 100 drops, in the same order),
-- and a refused request leaves the simulation as it was.
local nextDropped, added, nextAdded, addedCount = 1, {}, 1, 0
local accepted, replies = {}, {}
local bucket = nil
for r = 1, #starts do
  h = starts[r]
  local n = tonumber(ARGV[h + 3])
  local l, nd, na, grow = len, nextDropped, nextAdded, 0
  for k = 1, n do
    local size = #ARGV[h + 2 + 2 * k]
    grow = grow + size
    added[addedCount + k] = size
    l = l + 1
    while l > 100 do
      if nd <= #dropped then
        grow = grow - dropped[nd]
        nd = nd + 1
      else
        grow = grow - added[na]
        na = na + 1
      end
      l = l - 1
    end
  end
  local after = math.max(0, streamBytes + grow)
  local delta = after - streamBytes
  if maxBytes > 0 and delta > 0 and stored + delta > maxBytes then
    replies[r] = redis.status_reply('stored_bytes ' .. string.format('%d', stored) .. ' ' .. string.format('%d', delta) .. ' ' .. ARGV[8])
  else
    local cost = tonumber(ARGV[h + 2])
    local wait = 0
    if cost > 0 then
      if bucket == nil then bucket = bucket_open(KEYS[7], burst, tonumber(ARGV[h])) end
      wait = bucket_take(bucket, rate, burst, tonumber(ARGV[h]), cost)
    end
    if wait > 0 then
      replies[r] = wait
    else
      accepted[r] = true
      replies[r] = {}
      len, nextDropped, nextAdded, addedCount = l, nd, na, addedCount + n
      streamBytes, stored = after, stored + delta
    end
  end
end
if bucket ~= nil then bucket_close(KEYS[7], bucket, rate, burst) end
-- The call's last event trims the summary stream to exactly its latest 100, for all of the call's
-- events at once (a trim per event cost a fifth of a four-request call).
local lastPaying = 0
for r = 1, #starts do
  if accepted[r] and tonumber(ARGV[starts[r] + 3]) > 0 then lastPaying = r end
end
if lastPaying == 0 then return replies end
if fresh then redis.call('SADD', KEYS[3], ARGV[3]) end
for r = 1, #starts do
  if accepted[r] then
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
redis.call('HSET', KEYS[8], field, string.format('%d', streamBytes), 'bytes', string.format('%d', stored))
return replies
`,
);
