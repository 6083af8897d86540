import { script, type ScriptDef } from "../script.js";

/**
 * Claims a username for a user being created (the first step of `UserStore.create`). A claim
 * whose user never committed (not in the user list: its create crashed, or is still running and
 * will then find its claim gone at commit) does not block: it is taken over, so a retry with the
 * same username succeeds instead of being refused forever.
 *
 * KEYS[1] usernames (hash: username -> user id), KEYS[2] the user list (zset); both global.
 * ARGV[1] the username, ARGV[2] the new user's id.
 * Returns "" when claimed (it was free or already this id's), the id of the uncommitted user whose
 * claim was taken over, or nil when a committed user holds the name.
 */
export const USERNAME_CLAIM: ScriptDef = script(
  "tribUsernameClaim",
  2,
  `
local holder = redis.call('HGET', KEYS[1], ARGV[1])
if holder == false or holder == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return ''
end
if redis.call('ZSCORE', KEYS[2], holder) then return false end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return holder
`,
);
