import { script, type ScriptDef } from "../script.js";

/**
 * Takes a slot for one live-tail stream of a user, unless the user already has as many open as
 * allowed: one atomic step, so streams opened at once on several processes cannot all pass the
 * limit. Each process refreshes its streams' scores every heartbeat; a stream whose process died
 * stops being refreshed and its slot is freed once its score is older than the staleness bound.
 *
 * KEYS[1] the user's open streams (zset: stream id -> last refresh, epoch ms).
 * ARGV[1] stream id, ARGV[2] now (epoch ms), ARGV[3] staleness bound (ms), ARGV[4] most streams
 *   (0 = unlimited).
 * Returns 1 (slot taken) or 0 (the user is at the limit; nothing written).
 */
export const TAIL_STREAM_OPEN: ScriptDef = script(
  "tribTailStreamOpen",
  1,
  `
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local max = tonumber(ARGV[4])
if max > 0 and redis.call('ZCARD', KEYS[1]) >= max then return 0 end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
`,
);
