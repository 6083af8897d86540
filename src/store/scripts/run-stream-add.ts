import { script, type ScriptDef } from "../script.js";

/**
 * Puts source runs in the run stream (store/run-stream.ts), each unless its user already has
 * ARGV[1] entries there (then the caller queues it in BullMQ: the overflow) or its id was put
 * there already (a fan-out or timer tick redone after a crash). The cap check, the count, the id
 * and the XADD are one atomic step, so a run counted is a run in the stream. Never trims: entries
 * leave the stream only when a consumer acknowledges them.
 * KEYS[1] run stream, KEYS[2] per-user counts (hash), KEYS[3] ids put (zset: id -> expiry ms).
 * ARGV[1] entries per user at most, ARGV[2] now (ms), ARGV[3] how long an id is remembered (ms),
 * ARGV[4] ids remembered at most; then per run: id ("" for none), user id, job JSON.
 * Returns per run: 1 put in the stream, 0 a duplicate (nothing done), 2 overflow (nothing done).
 */
export const RUN_STREAM_ADD: ScriptDef = script(
  "tribRunStreamAdd",
  3,
  `
local cap = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
local out = {}
local remembered = false
for i = 5, #ARGV, 3 do
  local id, user, job = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local status = 2
  if id ~= '' then
    if not remembered then
      redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
      remembered = true
    end
    if redis.call('ZSCORE', KEYS[3], id) then status = 0 end
  end
  if status ~= 0 and (tonumber(redis.call('HGET', KEYS[2], user)) or 0) < cap then
    redis.call('HINCRBY', KEYS[2], user, 1)
    if id ~= '' then redis.call('ZADD', KEYS[3], now + ttl, id) end
    redis.call('XADD', KEYS[1], '*', 'u', user, 'j', job)
    status = 1
  end
  out[#out + 1] = status
end
if remembered then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(keep + 1)) end
return out
`,
);
