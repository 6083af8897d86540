import { script, type ScriptDef } from "../script.js";

/**
 * Settles runs of the run stream (store/run-stream.ts): acknowledges and deletes each entry and
 * takes it off its user's count (the field goes at 0). An entry no longer pending (acknowledged
 * already by a consumer that took it over) changes no count, so a count never goes below what is
 * in the stream.
 * KEYS[1] run stream, KEYS[2] per-user counts (hash). ARGV[1] group; then per run: entry id, user id.
 * Returns how many entries were acknowledged.
 */
export const RUN_STREAM_ACK: ScriptDef = script(
  "tribRunStreamAck",
  2,
  `
local acked = 0
for i = 2, #ARGV, 2 do
  local id, user = ARGV[i], ARGV[i + 1]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    acked = acked + 1
    redis.call('XDEL', KEYS[1], id)
    if redis.call('HINCRBY', KEYS[2], user, -1) <= 0 then redis.call('HDEL', KEYS[2], user) end
  end
end
return acked
`,
);
