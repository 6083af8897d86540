import { script, type ScriptDef } from "../script.js";

/**
 * Extends a lock only while its owner holds it (compare-and-extend). KEYS[1] the lock; ARGV[1] the
 * owner token, ARGV[2] the new TTL in ms. Returns 1 when extended, 0 when another owner holds it
 * (or nobody does).
 */
export const LOCK_RENEW: ScriptDef = script(
  "tribLockRenew",
  1,
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end",
);
