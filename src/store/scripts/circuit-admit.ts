import { script, type ScriptDef } from "../script.js";

/**
 * Admits a delivery attempt to a webhook through its circuit breaker (domain/circuit.ts `admit`,
 * as one atomic step shared by every worker process).
 *
 * KEYS[1] the circuit (hash {f: consecutive failures, k: consecutive openings, o: opened at ms,
 *   n: next probe at ms, p: probe lease until ms, pt: probe token, c: the n for which a waiting
 *   delivery was picked to make the probe}; absent = closed, no failures),
 * KEYS[2] the deliveries waiting on it (zset: BullMQ job id by the time its wait ends, the latest
 *   of its waits: a job turned away again later waits longer).
 * ARGV[1] now (ms), ARGV[2] the probe lease (ms), ARGV[3] the attempt's token (its delivery id),
 *   ARGV[4] the attempt's job id (parked in KEYS[2] when it must wait, for release on close),
 *   ARGV[5] the probe's head start (ms): how much longer than the probe the others wait.
 * Returns {0, consecutive failures} go (closed), {1, lease until} go as the probe (the lease's holder is admitted again: a probe
 * that waited for the rate limit), {2, until} wait (and parked), {3, until} wait to make the next probe (and parked).
 * A closed circuit costs one HMGET and no write.
 */
export const CIRCUIT_ADMIT: ScriptDef = script(
  "tribCircuitAdmit",
  2,
  `
local s = redis.call('HMGET', KEYS[1], 'k', 'n', 'p', 'pt', 'f', 'c')
local openings = tonumber(s[1]) or 0
if openings == 0 then return {0, tonumber(s[5]) or 0} end
local now = tonumber(ARGV[1])
local n = tonumber(s[2])
local p = tonumber(s[3])
local untilMs
if n and now < n then
  if s[6] ~= s[2] then
    redis.call('HSET', KEYS[1], 'c', s[2])
    redis.call('ZADD', KEYS[2], 'GT', n, ARGV[4])
    return {3, n}
  end
  untilMs = n + tonumber(ARGV[5])
elseif p and now < p and s[4] ~= ARGV[3] then
  untilMs = p
else
  local lease = now + tonumber(ARGV[2])
  redis.call('HSET', KEYS[1], 'p', string.format('%.0f', lease), 'pt', ARGV[3])
  return {1, lease}
end
redis.call('ZADD', KEYS[2], 'GT', untilMs, ARGV[4])
return {2, untilMs}
`,
);
