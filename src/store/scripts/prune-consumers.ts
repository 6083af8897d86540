import { script, type ScriptDef } from "../script.js";

/**
 * Drops consumers of the fan-out group that hold no pending entry and have not touched the outbox
 * for ARGV[2] ms (processes that stopped or died: every start registers a new consumer). The
 * pending check and the deletion are one atomic step, so no entry can be dropped with its
 * consumer; a live consumer deleted anyway would be registered again by its next read.
 * KEYS[1] outbox; ARGV[1] group, ARGV[2] minimum idle ms, ARGV[3] the caller's consumer (kept).
 * Returns how many consumers were removed.
 */
export const PRUNE_CONSUMERS: ScriptDef = script(
  "tribPruneConsumers",
  1,
  `
local removed = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[3] and tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed = removed + 1
  end
end
return removed
`,
);
