import { script, type ScriptDef } from "../script.js";

/**
 * A start slot of a webhook's `rate_limit_per_second` (store/rate-limit.ts WebhookRateLimiter):
 * a delivery that cannot start now is handed the webhook's next free start time and waits until
 * then, so N waiting deliveries get N distinct slots `interval` apart and each comes back once, at
 * its turn, instead of every one of them trying again every interval.
 *
 * - Reservations live in a sorted set (token → slot); the next free slot is one interval after the
 *   latest one still reserved, so reservations given back (`drop`) or used up stop holding the
 *   schedule.
 * - Every start, reserved or not, must also conform to `a`, the theoretical time of the next start
 *   (GCRA over the starts actually made): `a <= now + interval / 2`, then `a = max(a, now) +
 *   interval`. So no window of one second ever holds more than `rate` starts plus one, however late
 *   reserved deliveries come back (a busy queue lets them pile up and then start together). A
 *   reserved delivery that finds a start too close before it takes a new slot, once: it never loops
 *   on the same turn. Deliveries that all come back equally late (every worker busy) still start at
 *   the rate: each conforms to the start before it.
 * - A circuit's probe (`probe`) needs only `a`: it does not queue behind the slots that deliveries
 *   turned away by the open circuit still hold, and takes no slot (one delivery, waiting at most
 *   an interval).
 * - A delivery that never comes back (deleted, given up) wastes its slot; its entry is dropped
 *   `keep` ms after its slot; the reservations expire `keep` ms after the latest one, the starts
 *   `keep` ms after `a`.
 * - The clock is Redis's (TIME): every worker process reads the same one.
 * - A worker of the previous version keeps a one-token bucket {t, at} in the same hash: its starts
 *   are read into `a`, and every start here writes the bucket empty at the matching time, so a
 *   rolling upgrade keeps the limit.
 *
 * KEYS[1] the webhook's starts (hash {a, t, at}), KEYS[2] its reservations (zset: token by slot
 * ms), both under the user's hash tag.
 * ARGV[1] the interval (1000 / rate, ms), ARGV[2] the attempt's token (its job id), ARGV[3] keep
 * (ms), ARGV[4] `take`, `probe` or `drop` (give the token's reservation back).
 * Returns 0 when the attempt may start now (`drop`: always), else the milliseconds to wait: until
 * its slot (reserved), or for a probe until it conforms.
 */
export const WEBHOOK_SLOT: ScriptDef = script(
  "tribWebhookSlot",
  2,
  `
local token = ARGV[2]
if ARGV[4] == 'drop' then
  redis.call('ZREM', KEYS[2], token)
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local interval = tonumber(ARGV[1])
local keep = tonumber(ARGV[3])
local tolerance = interval / 2
local s = redis.call('HMGET', KEYS[1], 'a', 't', 'at')
local a = tonumber(s[1]) or 0
local lt, lat = tonumber(s[2]), tonumber(s[3])
if lt and lat then a = math.max(a, lat + math.max(0, 1 - lt) * interval) end

local function go()
  a = math.max(a, now) + interval
  redis.call('HSET', KEYS[1], 'a', string.format('%.3f', a), 't', '0', 'at', string.format('%.3f', a - interval))
  redis.call('PEXPIRE', KEYS[1], math.ceil(a - now + keep))
  return 0
end

if ARGV[4] == 'probe' then
  if a <= now + tolerance then return go() end
  return math.ceil(a - tolerance - now)
end
local reserved = tonumber(redis.call('ZSCORE', KEYS[2], token))
if reserved then
  -- Back before its turn (its job was promoted, or the clocks of the hosts differ): wait again.
  if now + tolerance < reserved then return math.ceil(reserved - now) end
  redis.call('ZREM', KEYS[2], token)
  if a <= now + tolerance then return go() end
end
-- The tolerance is for coming back a little late or early, not for handing out slots: a new slot is
-- one interval after the latest start and the latest reservation.
local slot = math.max(now, a)
local latest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if latest then slot = math.max(slot, tonumber(latest) + interval) end
if slot <= now + tolerance then return go() end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - keep)
redis.call('ZADD', KEYS[2], string.format('%.3f', slot), token)
-- The latest slot: the reservations expire together, after it.
redis.call('PEXPIRE', KEYS[2], math.ceil(slot - now + keep))
return math.ceil(slot - now)
`,
);
