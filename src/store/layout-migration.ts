import { type ConnectionOptions, type JobType, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { hasIdShape } from "../domain/ids.js";
import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { checkLayout, claimLayout, type Layout, readLayout, withLayoutLock } from "./layout.js";
import { FANOUT_GROUP } from "./outbox-stream.js";

/**
 * Layout 1 -> layout 2 (SPEC §8, README "Upgrading"): layout 1 put a user's keys under the user's
 * own tag (`<p>:{<user id>}:...`), every event in one outbox under the global tag, and every BullMQ
 * queue under `<p>:{bull}`. Layout 2 puts a user's keys under its shard's tag, the outbox in one
 * stream per shard, and each queue under its own tag (the delivery queue kept `{bull}`).
 *
 * Single node only (a Redis Cluster was refused before layout 2, so none holds layout-1 data), with
 * every process of the old version stopped. Each step is idempotent and the layout record is
 * written last, so a crash at any point is repaired by running it again:
 * - a key RENAME is atomic (a renamed key no longer matches the scan);
 * - an outbox entry is appended to its shard and deleted from the old outbox in one transaction;
 * - a job is re-added under its id (an id already there is not added twice), and the old queue is
 *   obliterated only after all of them were.
 * No stored value holds a key name (values carry ids; key names are built by keys.ts), so renaming
 * keys is the whole of the re-tag.
 */

/** What a migration moved. */
export interface MigrationReport {
  /** Keys renamed from a user's tag to its shard's tag. */
  readonly keysRenamed: number;
  /** Users whose keys were renamed. */
  readonly users: number;
  /** Entries moved from the old outbox to the shard outboxes. */
  readonly outboxEntries: number;
  /** Jobs moved to their queue's new prefix, by queue name. */
  readonly jobs: Readonly<Record<string, number>>;
  /** Job schedulers (timers) re-created under the timers queue's new prefix. */
  readonly jobSchedulers: number;
}

export interface MigrationDeps {
  /** A single node (not a Cluster). */
  readonly redis: Redis;
  readonly keys: Keys;
  /** BullMQ's connection for the queues it moves jobs between. */
  readonly connection: ConnectionOptions;
  readonly now: () => number;
}

/** The queues that moved from `{bull}` (the delivery queue stayed). */
const MOVED_QUEUES = ["source-run", "maintenance", "timers"] as const;
/** Job states that still have work to do (completed and failed ones are history, not moved). */
const LIVE_STATES: JobType[] = ["active", "wait", "prioritized", "delayed", "waiting-children"];
const BATCH = 500;

/** True when Redis holds data written by layout 1 (users, the single outbox, or jobs of a moved queue). */
export async function hasLayout1Data(redis: Redis, keys: Keys): Promise<boolean> {
  const probes = [
    keys.legacyOutbox(),
    ...MOVED_QUEUES.flatMap((q) => ["meta", "id", "repeat", "delayed", "wait"].map((s) => `${keys.legacyBullPrefix}:${q}:${s}`)),
  ];
  if ((await redis.zcard(keys.users())) > 0) return true;
  // One key per EXISTS: they live in different slots (the hash-slot lint holds start-up to it too).
  for (const key of probes) if ((await redis.exists(key)) > 0) return true;
  return false;
}

/** Runs every step of the migration (each finds nothing to do on data already migrated), then writes the layout record. */
export async function migrateLayout(d: MigrationDeps): Promise<MigrationReport> {
  const { keysRenamed, users } = await renameUserKeys(d.redis, d.keys);
  const outboxEntries = await drainLegacyOutbox(d.redis, d.keys);
  const { jobs, jobSchedulers } = await moveJobs(d);
  checkLayout(await claimLayout(d.redis, d.keys), d.keys);
  return { keysRenamed, users, outboxEntries, jobs, jobSchedulers };
}

/** (a) `<p>:{<user id>}:<rest>` -> `<userKeyBase>:<rest>`, by SCAN (an offline step, never a request path). */
async function renameUserKeys(redis: Redis, keys: Keys): Promise<{ keysRenamed: number; users: number }> {
  const open = `${keys.prefix}:{`;
  const seen = new Set<string>();
  let renamed = 0;
  let cursor = "0";
  do {
    const [next, found] = await redis.scan(cursor, "MATCH", `${open}u_*`, "COUNT", 1000);
    cursor = next;
    const pipe = redis.pipeline();
    for (const key of found) {
      const close = key.indexOf("}", open.length);
      const userId = key.slice(open.length, close);
      // Layout 2's shard tags (`<p>.g<i>.<n>`) can match the pattern when the prefix starts with u_:
      // only a user id's tag (u_ + base62) followed by ':' is layout 1's.
      if (close < 0 || key[close + 1] !== ":" || !hasIdShape(userId, "u_")) continue;
      pipe.rename(key, `${keys.userKeyBase(userId)}:${key.slice(close + 2)}`);
      seen.add(userId);
      renamed++;
    }
    if (pipe.length > 0) throwFirst(await pipe.exec());
  } while (cursor !== "0");
  return { keysRenamed: renamed, users: seen.size };
}

/**
 * (b) Every entry of the old outbox (read or not: the stream holds only entries not yet fanned
 * out) goes to its user's shard outbox, in order, each in one transaction with its deletion.
 */
async function drainLegacyOutbox(redis: Redis, keys: Keys): Promise<number> {
  const legacy = keys.legacyOutbox();
  const grouped = new Set<string>();
  let moved = 0;
  for (;;) {
    const entries = (await redis.xrange(legacy, "-", "+", "COUNT", BATCH)) as [string, string[]][];
    if (entries.length === 0) break;
    for (const [id, fields] of entries) {
      const target = userOf(fields) === undefined ? keys.shardOutbox(0) : keys.outboxOf(userOf(fields) as string);
      if (!grouped.has(target)) {
        // From the stream's start, so fan-out reads what lands here even if its group is made later.
        await redis.xgroup("CREATE", target, FANOUT_GROUP, "0", "MKSTREAM").catch((err: Error) => {
          if (!/BUSYGROUP/.test(err.message)) throw err;
        });
        grouped.add(target);
      }
      throwFirst(
        await redis
          .multi()
          .xadd(target, "*", ...fields)
          .xdel(legacy, id)
          .exec(),
      );
      moved++;
    }
  }
  await redis.del(legacy);
  return moved;
}

/**
 * (c) The jobs of the source-run, maintenance and timers queues, from `{bull}` to their own tags:
 * same id, name, data and options, the delay that remained. Jobs a timer's scheduler made are not
 * copied: the scheduler is re-created under the new prefix (same id, repeat and template) and makes
 * its next tick there; the old one goes with the old queue, so no tick comes twice.
 */
async function moveJobs(d: MigrationDeps): Promise<{ jobs: Record<string, number>; jobSchedulers: number }> {
  const jobs: Record<string, number> = {};
  let jobSchedulers = 0;
  for (const name of MOVED_QUEUES) {
    jobs[name] = 0;
    const base = `${d.keys.legacyBullPrefix}:${name}`;
    if ((await d.redis.exists(`${base}:meta`, `${base}:id`, `${base}:repeat`, `${base}:delayed`, `${base}:wait`)) === 0) continue;
    const from = new Queue(name, { connection: d.connection, prefix: d.keys.legacyBullPrefix });
    const to = new Queue(name, { connection: d.connection, prefix: d.keys.queuePrefix(name) });
    try {
      for (const s of await from.getJobSchedulers()) {
        const repeat = s.pattern ? { pattern: s.pattern, tz: s.tz ?? undefined } : { every: Number(s.every) };
        await to.upsertJobScheduler(
          s.key,
          { ...repeat, ...(s.endDate ? { endDate: s.endDate } : {}) },
          {
            name: s.name,
            data: s.template?.data,
            opts: s.template?.opts,
          },
        );
        jobSchedulers++;
      }
      for (const state of LIVE_STATES) {
        for (let start = 0; ; start += BATCH) {
          const batch = await from.getJobs([state], start, start + BATCH - 1, true);
          for (const job of batch) {
            // A scheduler's next tick: the re-created scheduler makes its own. A past-due tick is
            // moved like any job (same creation time and delay, so the same tick run id: a tick
            // that already ran is not run again).
            if (!job?.id || (state === "delayed" && job.repeatJobKey)) continue;
            const { jobId: _id, repeatJobKey: _key, repeat: _repeat, ...opts } = job.opts as typeof job.opts & { repeat?: unknown };
            // Same creation time and delay: due when it was (BullMQ delays from `timestamp`).
            await to.add(job.name, job.data, {
              ...opts,
              jobId: movedJobId(job.id),
              timestamp: job.timestamp,
              delay: job.delay ?? opts.delay ?? 0,
            });
            jobs[name]++;
          }
          if (batch.length < BATCH) break;
        }
      }
      await from.obliterate({ force: true });
    } finally {
      await Promise.all([from.close(), to.close()]);
    }
  }
  return { jobs, jobSchedulers };
}

/**
 * At start-up (every process, before any role starts): reads the layout record; without one,
 * migrates layout-1 data (single node, under the layout lock: one process migrates, the others
 * wait for the record) or writes it; then checks it against OUTBOX_SHARDS. Returns the migration's
 * report when this process migrated.
 */
export async function prepareLayout(
  d: Omit<MigrationDeps, "redis"> & { redis: RedisClient },
): Promise<{ layout: Layout; migrated?: MigrationReport }> {
  const stored = await readLayout(d.redis, d.keys);
  if (stored) {
    checkLayout(stored, d.keys);
    return { layout: stored };
  }
  const node = d.redis.isCluster ? undefined : (d.redis as Redis);
  // A Cluster never held layout 1 (Cluster was refused before layout 2): nothing to migrate.
  if (node && (await hasLayout1Data(node, d.keys))) {
    const migrated = await withLayoutLock(
      node,
      d.keys,
      async () => (await readLayout(node, d.keys)) !== undefined,
      () => migrateLayout({ ...d, redis: node }),
    );
    const layout = (await readLayout(node, d.keys)) as Layout;
    checkLayout(layout, d.keys);
    return migrated ? { layout, migrated } : { layout };
  }
  const layout = await claimLayout(d.redis, d.keys);
  checkLayout(layout, d.keys);
  return { layout };
}

/**
 * The id a moved job gets: its own, except where BullMQ refuses it as a custom id: a queue's
 * counter ids (integers) and ids with colons other than a scheduler's `repeat:<id>:<ms>`. The
 * replacement is deterministic, so a re-run re-adds under the same id (a no-op).
 */
function movedJobId(id: string): string {
  if (/^\d+$/.test(id)) return `layout1-${id}`;
  return id.includes(":") && id.split(":").length !== 3 ? id.replaceAll(":", ".") : id;
}

/** The entry's `u` field (its user id; events/outbox.ts's wire format). */
function userOf(fields: readonly string[]): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === "u") return fields[i + 1];
  return undefined;
}

function throwFirst(replies: [Error | null, unknown][] | null): void {
  const failed = (replies ?? []).find(([err]) => err);
  if (!replies || failed) throw failed?.[0] ?? new Error("no reply");
}
