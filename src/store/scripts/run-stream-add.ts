import { script, type ScriptDef } from "../script.js";

/**
 * Putting one run into a shard's run stream, as a Lua function shared by this script and the
 * source request's accept script (store/scripts/source-request-accept.ts): `run_put(stream, counts,
 * parked, ends, cap, user, job)` adds the run while its user has fewer than `cap` entries in the
 * stream and none parked, else parks it, in order, until one of them settles
 * (store/scripts/run-stream-ack.ts moves it in then). Returns 1 put in the stream, 2 parked.
 */
export const RUN_PUT_LUA = `
local function run_put(stream, counts, parked, ends, cap, user, job)
  if (tonumber(redis.call('HGET', counts, user)) or 0) < cap and redis.call('HEXISTS', ends, 't ' .. user) == 0 then
    redis.call('HINCRBY', counts, user, 1)
    redis.call('XADD', stream, '*', 'u', user, 'j', job)
    return 1
  end
  local seq = redis.call('HINCRBY', ends, 't ' .. user, 1)
  redis.call('HSET', parked, user .. ' ' .. seq, job)
  return 2
end
`;

/**
 * Takes source runs into one shard's run stream (store/run-stream.ts): each one through `run_put`
 * (in the stream while its user has room, else parked). A run whose id was taken already (a
 * fan-out or timer tick redone after a crash) is skipped. The check, the count, the id and the
 * XADD or the park are one atomic step: a run counted is a run in the stream. Never trims: entries
 * leave the stream only when a consumer acknowledges them.
 * KEYS[1] the shard's run stream, KEYS[2] its per-user counts (hash), KEYS[3] its ids taken (zset:
 * id -> expiry ms), KEYS[4] its parked runs (hash "<user> <seq>" -> job), KEYS[5] its parked ends
 * (hash "h <user>"/"t <user>" -> seq): all in the shard's slot.
 * ARGV[1] entries per user at most, ARGV[2] now (ms), ARGV[3] how long an id is remembered (ms),
 * ARGV[4] ids remembered at most; then per run: id ("" for none), user id, job JSON.
 * Returns per run: 1 put in the stream, 0 a duplicate (nothing done), 2 parked.
 */
export const RUN_STREAM_ADD: ScriptDef = script(
  "tribRunStreamAdd",
  5,
  `${RUN_PUT_LUA}
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
  if status == 1 then status = run_put(KEYS[1], KEYS[2], KEYS[4], KEYS[5], cap, user, job) end
  out[#out + 1] = status
end
if remembered then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(keep + 1)) end
return out
`,
);
