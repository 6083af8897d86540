import type { ConnectionOptions } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisClient } from "../store/context.js";
import type { Keys } from "../store/keys.js";
import { checkLayout, claimLayout, readLayout, withLayoutLock } from "../store/layout.js";
import { type MigrationReport, migrateLayout } from "../store/layout-migration.js";
import { slotOf } from "../store/shard-layout.js";

/**
 * `tributary migrate`: layout 1 -> layout 2 (store/layout-migration.ts), under the layout lock.
 * Every step runs even when the layout record exists (they find nothing on migrated data), so a
 * run after a crash, or a second run, is safe; a record that disagrees with OUTBOX_SHARDS stops it
 * before anything moves.
 */
export async function migrate(d: {
  redis: RedisClient;
  keys: Keys;
  connection: ConnectionOptions;
}): Promise<{ layout: { version: number; outbox_shards: number }; moved: MigrationReport | null }> {
  const stored = await readLayout(d.redis, d.keys);
  if (stored) checkLayout(stored, d.keys);
  let moved: MigrationReport | null = null;
  if (!d.redis.isCluster) {
    const node = d.redis as Redis;
    moved =
      (await withLayoutLock(
        node,
        d.keys,
        async () => false,
        () => migrateLayout({ ...d, redis: node, now: Date.now }),
      )) ?? null;
  }
  // A Cluster never held layout-1 data (it was refused before layout 2): only the record to write.
  const layout = await claimLayout(d.redis, d.keys);
  checkLayout(layout, d.keys);
  return { layout: { version: layout.version, outbox_shards: layout.outboxShards }, moved };
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
  const ranges = (await redis.call("CLUSTER", "SLOTS")) as [number, number, [string, number, ...unknown[]], ...unknown[]][];
  return (slot) => {
    const range = ranges.find(([start, end]) => slot >= start && slot <= end);
    return range ? `${range[2][0]}:${range[2][1]}` : "unassigned";
  };
}

/** The placement as an aligned text table. */
export function formatPlacement(rows: readonly ShardPlacement[]): string {
  const table = [["SHARD", "TAG", "SLOT", "NODE"], ...rows.map((r) => [String(r.shard), r.tag, String(r.slot), r.node])];
  const widths = table[0]?.map((_, i) => Math.max(...table.map((row) => row[i]?.length ?? 0))) ?? [];
  return `${table
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")}\n`;
}
