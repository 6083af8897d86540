import { script, type ScriptDef } from "../script.js";

/**
 * The last step of `UserStore.create`: makes the user reachable (API key index, key state, user
 * list) only if the username claim still names it; a create whose claim was taken over in the
 * meantime (store/scripts/username-claim.ts) writes nothing and loses the name.
 *
 * KEYS[1] usernames, KEYS[2] apikeys (digest -> user id), KEYS[3] apikey-of (user id -> "digest
 *   last4"), KEYS[4] the user list (zset by creation ms); all global.
 * ARGV[1] username, ARGV[2] user id, ARGV[3] key digest, ARGV[4] key's last four, ARGV[5] creation ms.
 * Returns 1 when committed, 0 when the claim is another user's.
 */
export const USER_COMMIT: ScriptDef = script(
  "tribUserCommit",
  4,
  `
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3] .. ' ' .. ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[2])
return 1
`,
);
