import { script, type ScriptDef } from "../script.js";

/**
 * The token-bucket step as Lua functions, shared by this script, the record script (which charges
 * the user's ingress bucket in the same step as the record) and the source request's admission.
 * A bucket is a hash {t: tokens, at: ms of the last refill} in one key, refilled at `rate` tokens
 * per second up to `burst`; a take takes `cost` tokens or none.
 *
 * - `bucket_open(key, burst, now)` reads a bucket into a Lua table (a new one is full);
 * - `bucket_take(b, rate, burst, now, cost)` refills it to `now`, takes `cost` tokens or none, and
 *   returns 0 when taken, else the milliseconds until enough have refilled;
 * - `bucket_close(key, b, rate, burst)` writes it back; the key expires once a full bucket would
 *   have refilled, so idle buckets take no space;
 * - `take_tokens(key, rate, burst, now, cost)` is the three for one take.
 *
 * `BUCKET_STEPS_LUA` holds the first three, `TAKE_TOKENS_LUA` all four (a script carries only what
 * it calls).
 *
 * A script that takes several times from one bucket (the record script: one take per request it
 * records) opens it once and closes it once: the same outcome as a `take_tokens` per take (but for
 * the tokens kept at full precision between takes instead of as `tostring`'s 14 digits), with two
 * Redis calls in all instead of three per take (docs/decisions.md "One bucket read and one trim per record call").
 */
export const BUCKET_STEPS_LUA = `
local function bucket_open(key, burst, now)
  local state = redis.call('HMGET', key, 't', 'at')
  return { tokens = tonumber(state[1]) or burst, at = tonumber(state[2]) or now }
end
local function bucket_take(b, rate, burst, now, cost)
  local tokens = math.min(burst, b.tokens + (math.max(0, now - b.at) / 1000) * rate)
  local wait = 0
  if tokens >= cost then
    tokens = tokens - cost
  else
    wait = math.ceil((cost - tokens) / rate * 1000)
  end
  b.tokens = tokens
  b.at = now
  return wait
end
local function bucket_close(key, b, rate, burst)
  redis.call('HSET', key, 't', tostring(b.tokens), 'at', tostring(b.at))
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
end
`;

export const TAKE_TOKENS_LUA = `${BUCKET_STEPS_LUA}
local function take_tokens(key, rate, burst, now, cost)
  local b = bucket_open(key, burst, now)
  local wait = bucket_take(b, rate, burst, now, cost)
  bucket_close(key, b, rate, burst)
  return wait
end
`;

/**
 * A token bucket in one key, refilled at `rate` tokens per second up to `burst`; a request takes
 * `cost` tokens (one HTTP request, or every event of a batch) or none at all.
 *
 * KEYS[1] the bucket (hash {t: tokens, at: ms of the last refill}), under its owner's hash tag.
 * ARGV[1] rate (tokens per second, > 0), ARGV[2] burst (bucket size), ARGV[3] now (ms), ARGV[4]
 *   cost (default 1; a cost above the burst can never be paid: callers refuse it first).
 * Returns 0 when the tokens were taken, else the milliseconds until enough have refilled (nothing
 * taken).
 */
export const TOKEN_BUCKET: ScriptDef = script(
  "tokenBucket",
  1,
  `${TAKE_TOKENS_LUA}
return take_tokens(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]) or 1)
`,
);
