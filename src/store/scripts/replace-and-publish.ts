import { script, type ScriptDef } from "../script.js";

/**
 * Replaces a record only if it still holds the text it was read as, and announces the change in
 * the same atomic step: a compare-and-set for read-modify-write updates of JSON records, so two
 * writers that read the same version cannot both win (the loser reads again), and no listener
 * cache can miss a change that was written.
 *
 * KEYS[1] the record (a string key).
 * ARGV[1] the text read, ARGV[2] the new text, ARGV[3] the pub/sub channel, ARGV[4] the message.
 * Returns 1 written and published; 0 the record changed since it was read (nothing written);
 * -1 the record is gone (nothing written: a deleted record is not resurrected).
 */
export const REPLACE_AND_PUBLISH: ScriptDef = script(
  "tribReplaceAndPublish",
  1,
  `
local current = redis.call('GET', KEYS[1])
if current == false then return -1 end
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`,
);
