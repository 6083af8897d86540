import keySlot from "cluster-key-slot";
import { MAX_SHARDS } from "../domain/shards.js";

/**
 * The shard layout of a deployment (SPEC §8 "Sharded outbox"): `OUTBOX_SHARDS` shards, each with
 * one hash tag. A user belongs to one shard (`shardOf`, pure, never stored) and every key of the
 * user carries its shard's tag, so the record step (the user's event streams and the shard's outbox
 * stream) stays one atomic step on one slot, and the shards spread the hot path over the masters
 * of a Redis Cluster.
 */

/** Redis Cluster's slot count. */
const SLOTS = 16_384;

export { MAX_SHARDS };

/** FNV-1a, 32 bits: a fast, well-spread hash of a user id (ids are random base62). */
export function fnv1a32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The shard of a user: fnv1a32(id) mod shards. */
export function shardOf(userId: string, shards: number): number {
  return fnv1a32(userId) % shards;
}

/**
 * The hash tags of the shards, balanced over the slot space: shard i's tag is `<prefix>.g<i>.<n>`
 * with the first nonce n whose slot falls in the i-th 1/shards of the slots. A cluster made with
 * contiguous slot ranges per master (what `redis-cli --cluster create` does) then holds about
 * shards / masters shards on each master; plainly hashed tags split 16 shards 7/3/6 over three
 * masters (shared/design/redis-cluster.md 4.2). Pure and deterministic: every process derives the
 * same tags from (prefix, shards).
 */
export function shardTags(prefix: string, shards: number): readonly string[] {
  if (!Number.isInteger(shards) || shards < 1 || shards > MAX_SHARDS) throw new Error(`shards must be an integer in 1..${MAX_SHARDS}`);
  const tags: string[] = [];
  for (let i = 0; i < shards; i++) {
    const low = Math.floor((i * SLOTS) / shards);
    const high = Math.floor(((i + 1) * SLOTS) / shards);
    for (let n = 0; ; n++) {
      const tag = `${prefix}.g${i}.${n}`;
      const slot = keySlot(tag);
      if (slot >= low && slot < high) {
        tags.push(tag);
        break;
      }
    }
  }
  return Object.freeze(tags);
}

/** The slot a key hashes to (its hash tag's, when it has one). */
export function slotOf(key: string): number {
  return keySlot(key);
}
