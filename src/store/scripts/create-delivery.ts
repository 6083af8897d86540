import { script, type ScriptDef } from "../script.js";

/**
 * Creates a delivery record (SET NX) and indexes it (ZADD NX) in one call; returns 0 without
 * writing when the record already exists. Then keeps about the newest `limit` deliveries of the
 * listener: once the index holds `slack` more than `limit`, the oldest excess (at most TRIM_SCAN)
 * are read with one MGET and the finished (delivered or failed) ones go with one ZREM and one
 * DEL, so trimming costs a few commands per `slack` deliveries rather than per delivery. A
 * pending record (waiting for a retry) is still needed by its job (dedupe check, attempts,
 * replay) and stays, so many retrying deliveries can hold the log above the limit. The trim runs
 * only when the excess is a multiple of `slack`: pending records at the old end, which it reads
 * and keeps, would otherwise be read again by every creation while they wait (a backlog after an
 * outage), and the cost per delivery would grow with them up to the scan size. Runs inside Redis
 * so old records never travel to the worker just to read their status.
 *
 * Returns -1 without writing when the listener's own record (KEYS[3]) is gone: deleting a webhook
 * deletes its attempt log, and an attempt that was in flight must not start a new one.
 *
 * KEYS[1] the record, KEYS[2] the listener's index zset, KEYS[3] the listener's record (webhook or
 * workflow), all under the user's hash tag; ARGV[1] record JSON,
 * ARGV[2] score, ARGV[3] delivery id, ARGV[4] limit, ARGV[5] slack, ARGV[6] scan size, ARGV[7]
 * the record key prefix. A record is pending when its JSON holds `"status":"pending"` with bare
 * quotes: string values escape every quote, so only the top-level key can match. A trimmed record
 * that refers to its event's stored payload (`payload_key`, a key of the same user: store/payloads.ts)
 * releases its hold there, and the payload goes with its last holder (as payload-release.ts does).
 */
export const CREATE_DELIVERY: ScriptDef = script(
  "tribCreateDelivery",
  3,
  `
if redis.call('EXISTS', KEYS[3]) == 0 then return -1 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[3])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
local slack = tonumber(ARGV[5])
if excess < slack or excess % slack ~= 0 then return 1 end
local oldest = redis.call('ZRANGE', KEYS[2], 0, math.min(excess, tonumber(ARGV[6])) - 1)
local recordKeys = {}
for i, id in ipairs(oldest) do recordKeys[i] = ARGV[7] .. id end
local raws = redis.call('MGET', unpack(recordKeys))
local ids, dels = {}, {}
for i, id in ipairs(oldest) do
  local raw = raws[i]
  if not raw or not string.find(raw, '"status":"pending"', 1, true) then
    ids[#ids + 1] = id
    if raw then
      dels[#dels + 1] = recordKeys[i]
      if string.find(raw, '"payload_key":', 1, true) then
        local ok, rec = pcall(cjson.decode, raw)
        local held = ok and type(rec) == 'table' and rec.payload_key
        if type(held) == 'string' then
          redis.call('HDEL', held, id)
          if redis.call('HLEN', held) <= 1 then redis.call('DEL', held) end
        end
      end
    end
  end
end
if #ids > 0 then redis.call('ZREM', KEYS[2], unpack(ids)) end
if #dels > 0 then redis.call('DEL', unpack(dels)) end
return 1
`,
);
