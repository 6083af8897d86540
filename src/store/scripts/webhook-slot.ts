import { script, type ScriptDef } from "../script.js";

/**
 * A start slot of a webhook's `rate_limit_per_second` (store/rate-limit.ts WebhookRateLimiter):
 * a delivery that cannot start now is handed the webhook's next free start time and waits until
 * then, so N waiting deliveries get N distinct slots `interval` apart and each comes back once, at
 * its turn, instead of every one of them trying again every interval.
 *
 * Two clocks of the webhook, in one hash:
 * - `n`, the next free slot: the schedule that hands out turns (advanced by `interval` per slot);
 * - `a`, the theoretical time of the next start (GCRA over the starts actually made): every
 *   start, reserved or not, must have `a <= now + interval / 2`, then `a = max(a, now) + interval`.
 *   So no window of one second ever holds more than `rate` starts plus one, however late the
 *   reserved deliveries come back (a busy queue lets them pile up and then start together). A
 *   reserved delivery that finds a start too close before it takes a new slot, once: it never
 *   loops on the same turn.
 * The schedule and the starts are separate so that deliveries that all come back equally late
 * (every worker busy) still start at the rate instead of each losing its turn to a schedule that
 * ran ahead of them.
 *
 * Reservations live in a sorted set (token → slot). A delivery that never comes back (deleted,
 * given up) wastes its slot; its entry is dropped `keep` ms after its slot, and both keys expire
 * `keep` ms after the last slot handed out. The clock is Redis's (TIME): every worker process
 * reads the same one.
 *
 * A worker of the previous version keeps a one-token bucket {t, at} in the same hash: its starts
 * are read into `a`, and every start here writes the bucket empty at the matching time, so a
 * rolling upgrade keeps the limit.
 *
 * KEYS[1] the webhook's schedule (hash {n, a, t, at}), KEYS[2] its reservations (zset: token by
 * slot ms), both under the user's hash tag.
 * ARGV[1] the interval (1000 / rate, ms), ARGV[2] the attempt's token (its job id), ARGV[3] keep
 * (ms).
 * Returns 0 when the attempt may start now, else the milliseconds until its slot (reserved).
 */
export const WEBHOOK_SLOT: ScriptDef = script(
  "tribWebhookSlot",
  2,
  `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local interval = tonumber(ARGV[1])
local token = ARGV[2]
local keep = tonumber(ARGV[3])
local tolerance = interval / 2
local s = redis.call('HMGET', KEYS[1], 'n', 'a', 't', 'at')
local n = tonumber(s[1]) or 0
local a = tonumber(s[2]) or 0
local lt, lat = tonumber(s[3]), tonumber(s[4])
if lt and lat then a = math.max(a, lat + math.max(0, 1 - lt) * interval) end

local function save()
  redis.call('HSET', KEYS[1], 'n', string.format('%.3f', n), 'a', string.format('%.3f', a),
    't', '0', 'at', string.format('%.3f', a - interval))
  local ttl = math.ceil(math.max(n, a) - now + keep)
  redis.call('PEXPIRE', KEYS[1], ttl)
  if redis.call('ZCARD', KEYS[2]) > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - keep)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
local function go()
  a = math.max(a, now) + interval
  save()
  return 0
end

local reserved = tonumber(redis.call('ZSCORE', KEYS[2], token))
if reserved then
  -- Back before its turn (its job was promoted, or the clocks of the hosts differ): wait again.
  if now + tolerance < reserved then return math.ceil(reserved - now) end
  redis.call('ZREM', KEYS[2], token)
  if a <= now + tolerance then return go() end
end
local slot = math.max(n, now, a - tolerance)
if slot <= now then
  n = now + interval
  return go()
end
n = slot + interval
redis.call('ZADD', KEYS[2], string.format('%.3f', slot), token)
save()
return math.ceil(slot - now)
`,
);
