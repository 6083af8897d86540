import { script, type ScriptDef } from "../script.js";

/**
 * Records a bulk replay whose plan (the matched delivery ids, a list) was written before, unless
 * an identical replay (same webhook, same selectors) is still queueing: then the plan just
 * written is dropped and the running replay's id returned, so a second identical request queues
 * nothing twice and answers with the same id. The marker is set only for a plan that is not empty.
 *
 * KEYS[1] the "identical replay running" marker, KEYS[2] the new replay's record (hash), KEYS[3]
 * its plan; ARGV[1] the new replay id, ARGV[2] its time to live in ms, then field/value pairs of
 * the record. Returns the id of the replay that stands (the new one or the running one).
 */
export const REPLAY_CREATE: ScriptDef = script(
  "tribReplayCreate",
  3,
  `
local running = redis.call('GET', KEYS[1])
if running then
  redis.call('DEL', KEYS[3])
  return running
end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
-- An empty plan has nothing to queue: no marker, so the next identical request plans anew.
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return ARGV[1]
`,
);
