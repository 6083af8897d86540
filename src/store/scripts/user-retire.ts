import { script, type ScriptDef } from "../script.js";
import { REVOKE_KEY_LUA } from "./api-key-rotate.js";

/**
 * The global step of deleting a user (`UserStore.delete`, before its keys are unlinked): the user
 * leaves the list, frees the username and the key index, and the key's digest is published on the
 * revocation channel (auth caches drop it). The digest is read here, so a rotation that ran since
 * the caller read the user cannot leave its new key indexed.
 *
 * KEYS[1] apikeys, KEYS[2] apikey-of, KEYS[3] usernames, KEYS[4] the user list; all global.
 * ARGV[1] user id, ARGV[2] username, ARGV[3] the digest the user record holds ("" if none: used
 *   when apikey-of has no entry, users written before it), ARGV[4] the revocation channel.
 * Returns the revoked digest, or "" when there was none.
 */
export const USER_RETIRE: ScriptDef = script(
  "tribUserRetire",
  4,
  `${REVOKE_KEY_LUA}
local digest = revoke_current_key(KEYS[1], KEYS[2], ARGV[1], ARGV[3], ARGV[4])
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('HGET', KEYS[3], ARGV[2]) == ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[2]) end
redis.call('ZREM', KEYS[4], ARGV[1])
return digest
`,
);
