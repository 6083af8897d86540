import { script, type ScriptDef } from "../script.js";

/**
 * Takes source runs into the run stream (store/run-stream.ts). A run goes into the stream while
 * its user has fewer than ARGV[1] entries there; past that it is parked, in order, until one of
 * them settles (store/scripts/run-stream-ack.ts moves it in then). A run whose id was taken
 * already (a fan-out or timer tick redone after a crash) is skipped. The check, the count, the id
 * and the XADD or the park are one atomic step: a run counted is a run in the stream. Never trims:
 * entries leave the stream only when a consumer acknowledges them.
 * KEYS[1] run stream, KEYS[2] per-user counts (hash), KEYS[3] ids taken (zset: id -> expiry ms),
 * KEYS[4] parked runs (hash "<user> <seq>" -> job), KEYS[5] parked ends (hash "h <user>"/"t <user>" -> seq).
 * ARGV[1] entries per user at most, ARGV[2] now (ms), ARGV[3] how long an id is remembered (ms),
 * ARGV[4] ids remembered at most; then per run: id ("" for none), user id, job JSON.
 * Returns per run: 1 put in the stream, 0 a duplicate (nothing done), 2 parked.
 */
export const RUN_STREAM_ADD: ScriptDef = script(
  "tribRunStreamAdd",
  5,
  `
local cap = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
local out = {}
local remembered = false
for i = 5, #ARGV, 3 do
  local id, user, job = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local status = 1
  if id ~= '' then
    if not remembered then
      redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
      remembered = true
    end
    if redis.call('ZSCORE', KEYS[3], id) then status = 0 else redis.call('ZADD', KEYS[3], now + ttl, id) end
  end
  if status == 1 then
    if (tonumber(redis.call('HGET', KEYS[2], user)) or 0) < cap and redis.call('HEXISTS', KEYS[5], 't ' .. user) == 0 then
      redis.call('HINCRBY', KEYS[2], user, 1)
      redis.call('XADD', KEYS[1], '*', 'u', user, 'j', job)
    else
      local seq = redis.call('HINCRBY', KEYS[5], 't ' .. user, 1)
      redis.call('HSET', KEYS[4], user .. ' ' .. seq, job)
      status = 2
    end
  end
  out[#out + 1] = status
end
if remembered then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(keep + 1)) end
return out
`,
);
