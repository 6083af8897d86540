import { script, type ScriptDef } from "../script.js";

/**
 * Revoking a user's current API key as a Lua function, shared by the rotation and the retirement
 * of a user (this script and user-retire.ts): `revoke_current_key(index, key_of, user,
 * fallback, channel)` reads the user's digest from `key_of` (user id -> "digest last4"; `fallback`,
 * the digest a user record written before `key_of` holds, when it has no entry), drops it from
 * `index` (digest -> user id) if it still names this user, publishes it on `channel` (auth caches
 * drop it), and returns it ("" when there was none). Reading the digest inside the script is what
 * keeps a concurrent rotation from leaving a key behind.
 */
export const REVOKE_KEY_LUA = `
local function revoke_current_key(index, key_of, user, fallback, channel)
  local state = redis.call('HGET', key_of, user)
  local digest = fallback
  if state then digest = string.match(state, '^(%S+)') or '' end
  if digest ~= '' then
    if redis.call('HGET', index, digest) == user then redis.call('HDEL', index, digest) end
    redis.call('PUBLISH', channel, digest)
  end
  return digest
end
`;

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
  `${REVOKE_KEY_LUA}
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then return false end
local old = revoke_current_key(KEYS[1], KEYS[2], ARGV[1], ARGV[4], ARGV[5])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return old
`,
);
