import { script, type ScriptDef } from "../script.js";

/**
 * Replaces a user's API key in one step: the old digest leaves the index and is published on the
 * revocation channel (auth caches drop it) in the same step as the new one is indexed, so there is
 * no moment with both or neither. The old digest is read here, so two concurrent rotations cannot
 * both leave a key behind.
 *
 * KEYS[1] apikeys (digest -> user id), KEYS[2] apikey-of (user id -> "digest last4"), KEYS[3] the
 *   user list (zset); all global.
 * ARGV[1] user id, ARGV[2] new digest, ARGV[3] new key's last four, ARGV[4] the digest the user
 *   record holds ("" if none: a user written before apikey-of, used when apikey-of has no entry),
 *   ARGV[5] the revocation channel.
 * Returns the revoked digest ("" if there was none), or nil for a user not in the list (deleted).
 */
export const API_KEY_ROTATE: ScriptDef = script(
  "tribApiKeyRotate",
  3,
  `
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return false end
local state = redis.call('HGET', KEYS[2], ARGV[1])
local old = ARGV[4]
if state then old = string.match(state, '^(%S+)') or '' end
if old ~= '' then
  if redis.call('HGET', KEYS[1], old) == ARGV[1] then redis.call('HDEL', KEYS[1], old) end
  redis.call('PUBLISH', ARGV[5], old)
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return old
`,
);
