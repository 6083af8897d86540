import { Cluster, type Redis } from "ioredis";
import type { RedisClient } from "./context.js";
import { slotOf } from "./shard-layout.js";

/** Keys asked for per SCAN call, and unlinked per UNLINK. */
const BATCH = 500;

/**
 * The nodes that may hold keys matching a pattern: the one node of a single Redis; on a Cluster,
 * the master serving `slot` when the client's slot map knows it (the keys of one hash tag), else
 * every master. SCAN on a Cluster client would go to one node picked at random.
 */
function nodesFor(redis: RedisClient, slot?: number): Redis[] {
  if (!(redis instanceof Cluster)) return [redis];
  const masters = redis.nodes("master");
  const owner = slot === undefined ? undefined : redis.slots[slot]?.[0];
  const node = owner === undefined ? undefined : masters.find((m) => `${m.options.host}:${m.options.port}` === owner);
  return node ? [node] : masters;
}

/**
 * Hands every key matching `pattern` to `each`, in groups of one slot (at most BATCH keys). `sameSlotAs`: a key of
 * the one hash tag every match carries (a user's keys), so that a Cluster is scanned on its slot's
 * master only. Not for a request path (SPEC §8): SCAN walks the node's whole key space.
 */
export async function scanMatching(
  redis: RedisClient,
  pattern: string,
  sameSlotAs: string | undefined,
  each: (keys: string[]) => Promise<void>,
): Promise<void> {
  for (const node of nodesFor(redis, sameSlotAs === undefined ? undefined : slotOf(sameSlotAs))) {
    let cursor = "0";
    do {
      const [next, found] = await node.scan(cursor, "MATCH", pattern, "COUNT", BATCH);
      cursor = next;
      for (const group of bySlot(found)) {
        for (let i = 0; i < group.length; i += BATCH) await each(group.slice(i, i + BATCH));
      }
    } while (cursor !== "0");
  }
}

/**
 * Unlinks every key matching `pattern` (see scanMatching). Each UNLINK names keys of one slot
 * (legal on a Cluster), through the client, not the node: a Cluster routes by slot (and follows a
 * MOVED). Returns how many keys were unlinked.
 */
export async function unlinkMatching(redis: RedisClient, pattern: string, sameSlotAs?: string): Promise<number> {
  let removed = 0;
  await scanMatching(redis, pattern, sameSlotAs, async (keys) => {
    removed += await redis.unlink(...keys);
  });
  return removed;
}

function bySlot(keys: readonly string[]): string[][] {
  const groups = new Map<number, string[]>();
  for (const k of keys) {
    const slot = slotOf(k);
    const g = groups.get(slot);
    if (g) g.push(k);
    else groups.set(slot, [k]);
  }
  return [...groups.values()];
}
