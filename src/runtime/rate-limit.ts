import type { Redis } from "ioredis";

/**
 * A token bucket per key, refilled at `ratePerSecond` up to `burst` tokens, kept in Redis so every
 * API process shares it. Returns 0 when allowed, else the milliseconds until a token is free.
 */
const TOKEN_BUCKET_LUA = `
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 't', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + (math.max(0, now - at) / 1000) * rate)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) / rate * 1000)
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return wait
`;

export class RateLimiter {
  constructor(
    private readonly redis: Redis,
    private readonly ratePerSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!("tokenBucket" in redis)) redis.defineCommand("tokenBucket", { numberOfKeys: 1, lua: TOKEN_BUCKET_LUA });
  }

  /** 0 when the request may go ahead, else the wait in ms. */
  async take(key: string): Promise<number> {
    // biome-ignore lint/suspicious/noExplicitAny: defineCommand adds the method at run time.
    return Number(await (this.redis as any).tokenBucket(key, this.ratePerSecond, this.burst, this.now()));
  }
}
