import { script, type ScriptDef } from "../script.js";

/**
 * Applies a delivery attempt's result to its webhook's circuit (domain/circuit.ts `afterAttempt`,
 * as one atomic step shared by every worker process).
 *
 * KEYS[1] the circuit (hash, see circuit-admit.ts), KEYS[2] the deliveries waiting on it (zset).
 * ARGV[1] "s" (success) or "f" (failure), ARGV[2] the attempt's token (its delivery id), ARGV[3]
 *   now (ms), ARGV[4] the failure threshold, ARGV[5] the first cool-down (ms), ARGV[6] the longest,
 *   ARGV[7] a pub/sub channel and ARGV[8] the message published on it when a failure ends a clean
 *   state (closed, no failures): processes that skip the circuit while they know it clean stop.
 *   ARGV[9] how soon (ms) a wait must end for its job not to be released: it runs by itself then.
 * Returns {0} no change, {1} opened, {2} reopened (the probe failed), {3, job ids} closed: the job
 * ids of the waiting deliveries whose wait ends later than ARGV[9] from now, taken from KEYS[2] in
 * the same step (which is deleted), for the caller to release. After an outage most waits end at
 * the probe that closes the circuit: their jobs are due already, and releasing each (a read and a
 * promotion per job) would only add to the recovery's cost.
 * A success on a closed circuit without failures costs one HMGET and no write.
 */
export const CIRCUIT_RECORD: ScriptDef = script(
  "tribCircuitRecord",
  2,
  `
local s = redis.call('HMGET', KEYS[1], 'f', 'k', 'pt')
local failures = tonumber(s[1]) or 0
local openings = tonumber(s[2]) or 0
if ARGV[1] == 's' then
  if openings > 0 then
    redis.call('DEL', KEYS[1])
    local parked = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. (tonumber(ARGV[3]) + tonumber(ARGV[9])), '+inf')
    redis.call('DEL', KEYS[2])
    return {3, parked}
  end
  if failures > 0 then redis.call('DEL', KEYS[1]) end
  return {0}
end
if failures == 0 and openings == 0 then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
failures = failures + 1
local now = tonumber(ARGV[3])
local function cooldown(k)
  return math.min(tonumber(ARGV[5]) * 2 ^ math.min(k - 1, 40), tonumber(ARGV[6]))
end
if openings == 0 then
  if failures < tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], 'f', failures)
    return {0}
  end
  redis.call('HSET', KEYS[1], 'f', failures, 'k', 1, 'o', string.format('%.0f', now), 'n', string.format('%.0f', now + cooldown(1)))
  redis.call('HDEL', KEYS[1], 'p', 'pt')
  return {1}
end
if s[3] ~= ARGV[2] then
  redis.call('HSET', KEYS[1], 'f', failures)
  return {0}
end
openings = openings + 1
redis.call('HSET', KEYS[1], 'f', failures, 'k', openings, 'n', string.format('%.0f', now + cooldown(openings)))
redis.call('HDEL', KEYS[1], 'p', 'pt')
return {2}
`,
);
