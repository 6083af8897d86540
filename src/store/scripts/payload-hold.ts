import { script, type ScriptDef } from "../script.js";

/**
 * Stores an event's payload once for the deliveries that will send it from the queue, and names
 * them as its holders: KEYS[1] the event's payload hash (`p`: the payload; one field per holding
 * delivery id). ARGV[1] the payload, ARGV[2..] the delivery ids. The payload is written only when
 * absent (a redone fan-out, a retry after a direct attempt: the same event, the same text), and
 * holding twice is holding once, so a step redone after a crash changes nothing. Returns the
 * number of holders.
 */
export const PAYLOAD_HOLD: ScriptDef = script(
  "tribPayloadHold",
  1,
  `
redis.call('HSETNX', KEYS[1], 'p', ARGV[1])
for i = 2, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], '1') end
return redis.call('HLEN', KEYS[1]) - 1
`,
);
