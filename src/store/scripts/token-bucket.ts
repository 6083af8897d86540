import { script, type ScriptDef } from "../script.js";

/**
 * The token-bucket step as a Lua function, shared by this script and the record script (which
 * charges the user's ingress bucket in the same step as the record): `take_tokens(key, rate,
 * burst, now, cost)` refills the bucket in `key` (hash {t: tokens, at: ms of the last refill}) at
 * `rate` tokens per second up to `burst`, takes `cost` tokens or none, and returns 0 when taken,
 * else the milliseconds until enough have refilled. The key expires once a full bucket would have
 * refilled, so idle buckets take no space.
 */
export const TAKE_TOKENS_LUA = `
local function take_tokens(key, rate, burst, now, cost)
  local state = redis.call('HMGET', key, 't', 'at')
  local tokens = tonumber(state[1]) or burst
  local at = tonumber(state[2]) or now
  tokens = math.min(burst, tokens + (math.max(0, now - at) / 1000) * rate)
  local wait = 0
  if tokens >= cost then
    tokens = tokens - cost
  else
    wait = math.ceil((cost - tokens) / rate * 1000)
  end
  redis.call('HSET', key, 't', tostring(tokens), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil(burst / rate * 1000) + 1000)
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
