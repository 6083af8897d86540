import { script, type ScriptDef } from "../script.js";

/**
 * Drops deliveries from an event's payload holders, and the payload with the last of them: KEYS[1]
 * the event's payload hash (see payload-hold.ts); ARGV[1..] the delivery ids that no longer need it
 * (delivered, or their record left the attempt log). Releasing twice is releasing once. Returns the
 * number of holders left (0: the payload is gone).
 */
export const PAYLOAD_RELEASE: ScriptDef = script(
  "tribPayloadRelease",
  1,
  `
redis.call('HDEL', KEYS[1], unpack(ARGV))
local left = redis.call('HLEN', KEYS[1]) - 1
if left <= 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
return left
`,
);
