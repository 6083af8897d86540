import { randomUUID } from "node:crypto";
import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { slotOf } from "./shard-layout.js";

/**
 * The deployment's layout record (SPEC §8): `keys.layout()`, a hash of `version` (the key layout,
 * 2 = shard tags) and `outbox_shards` (OUTBOX_SHARDS). Written once, at first start, field by
 * field with HSETNX, so concurrent first starts agree on the first writer's value; read at every
 * start, and a process configured otherwise refuses to run (users would hash to other shards).
 */
export const LAYOUT_VERSION = 2;

export interface Layout {
  readonly version: number;
  readonly outboxShards: number;
}

/** A process whose OUTBOX_SHARDS (or version) is not the deployment's: it must not start. */
export class LayoutMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LayoutMismatchError";
  }
}

/** The stored layout, or undefined before the first start of layout 2. */
export async function readLayout(redis: RedisClient, keys: Keys): Promise<Layout | undefined> {
  const h = await redis.hgetall(keys.layout());
  if (!h.version && !h.outbox_shards) return undefined;
  return { version: Number(h.version), outboxShards: Number(h.outbox_shards) };
}

/** Writes the layout unless one is there (HSETNX per field, one transaction); returns what is stored. */
export async function claimLayout(redis: RedisClient, keys: Keys): Promise<Layout> {
  const key = keys.layout();
  const replies = await redis.multi().hsetnx(key, "version", LAYOUT_VERSION).hsetnx(key, "outbox_shards", keys.shards).hgetall(key).exec();
  const failed = (replies ?? []).find(([err]) => err);
  if (!replies || failed) throw failed?.[0] ?? new Error("layout record: no reply");
  const h = replies[2]?.[1] as Record<string, string>;
  return { version: Number(h.version), outboxShards: Number(h.outbox_shards) };
}

/** Throws LayoutMismatchError unless the stored layout is the one this process was configured for. */
export function checkLayout(stored: Layout, keys: Keys): void {
  if (stored.version !== LAYOUT_VERSION) {
    throw new LayoutMismatchError(
      `the Redis key layout is version ${stored.version} (${keys.layout()}); this version of Tributary reads version ${LAYOUT_VERSION}`,
    );
  }
  if (stored.outboxShards !== keys.shards) {
    throw new LayoutMismatchError(
      `OUTBOX_SHARDS=${keys.shards} but this deployment was created with OUTBOX_SHARDS=${stored.outboxShards} (stored in ${keys.layout()}); ` +
        `set OUTBOX_SHARDS=${stored.outboxShards} (the shard count is fixed for the life of a deployment)`,
    );
  }
}

const LOCK_TTL_MS = 30_000;

/**
 * Runs `work` holding the layout lock (SET NX PX, renewed while it runs), so one process migrates
 * while the others wait; resolves `undefined` without running it when `done()` turns true while
 * waiting (another process finished).
 */
export async function withLayoutLock<T>(
  redis: RedisClient,
  keys: Keys,
  done: () => Promise<boolean>,
  work: () => Promise<T>,
  pollMs = 500,
): Promise<T | undefined> {
  const owner = randomUUID();
  const key = keys.layoutLock();
  for (;;) {
    if (await done()) return undefined;
    if ((await redis.set(key, owner, "PX", LOCK_TTL_MS, "NX")) === "OK") break;
    await new Promise((r) => setTimeout(r, pollMs));
  }
  const renew = setInterval(() => {
    void redis.set(key, owner, "PX", LOCK_TTL_MS, "XX").catch(() => {});
  }, LOCK_TTL_MS / 3);
  try {
    return await work();
  } finally {
    clearInterval(renew);
    // Only our own lock: compare, then delete (a stale owner's DEL would free a live migration).
    if ((await redis.get(key).catch(() => null)) === owner) await redis.del(key).catch(() => {});
  }
}

export interface ShardPlacement {
  readonly shard: number;
  readonly tag: string;
  readonly slot: number;
  /** host:port of the master owning the slot, or "this node" on a single Redis. */
  readonly node: string;
}

/** `tributary cluster shards`: where each shard of the layout lives (shard -> hash tag -> slot -> node). */
export async function shardPlacement(redis: RedisClient, keys: Keys): Promise<ShardPlacement[]> {
  // Read-only: the deployment's shards when it has a record (a different OUTBOX_SHARDS is an error).
  const stored = await readLayout(redis, keys);
  if (stored) checkLayout(stored, keys);
  const owner = redis.isCluster ? await slotOwners(redis) : () => "this node";
  return keys.shardTags.map((tag, shard) => {
    const slot = slotOf(keys.shardOutbox(shard));
    return { shard, tag, slot, node: owner(slot) };
  });
}

/** CLUSTER SLOTS as a lookup: slot -> "host:port" of its master ("unassigned" for a slot no master serves). */
async function slotOwners(redis: RedisClient): Promise<(slot: number) => string> {
  const ranges = await redis.cluster("SLOTS");
  return (slot) => {
    const master = ranges.find(([start, end]) => slot >= start && slot <= end)?.[2];
    return master ? `${master[0]}:${master[1]}` : "unassigned";
  };
}
