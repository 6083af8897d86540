/**
 * The bounds of OUTBOX_SHARDS (SPEC §8 "Sharded outbox"), shared by the configuration and the key
 * space (store/shard-layout.ts, store/keys.ts).
 */

/** OUTBOX_SHARDS's default: the shards of a deployment that did not choose (fixed once written). */
export const DEFAULT_OUTBOX_SHARDS = 16;

/** The most shards a deployment can have (each shard owns at least one slot range of 16384 / it). */
export const MAX_SHARDS = 1_024;
