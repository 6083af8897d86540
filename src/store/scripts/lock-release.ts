import { script, type ScriptDef } from "../script.js";

/**
 * Deletes a lock only while its owner holds it (compare-and-delete). KEYS[1] the lock; ARGV[1] the
 * owner token. Returns 1 when released, 0 otherwise.
 */
export const LOCK_RELEASE: ScriptDef = script(
  "tribLockRelease",
  1,
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
);
