import type { ConnectionOptions } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisClient } from "../store/context.js";
import type { Keys } from "../store/keys.js";
import { checkLayout, claimLayout, readLayout, type ShardPlacement, withLayoutLock } from "../store/layout.js";
import { type MigrationReport, migrateLayout } from "../store/layout-migration.js";

export { shardPlacement } from "../store/layout.js";

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
