import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { type GateVerdict, gateKeysAndArgs, gateVerdict, type RequestGate } from "./request-gate.js";
import { byShard, entryRef, type ReadGroup, ShardStreams, type StreamEntries } from "./shard-streams.js";
import { defineScript, type ScriptCall } from "./script.js";
import { RUN_STREAM_ACK } from "./scripts/run-stream-ack.js";
import { RUN_STREAM_ADD } from "./scripts/run-stream-add.js";
import { RUN_STREAM_HEAL } from "./scripts/run-stream-heal.js";
import { SOURCE_REQUEST_ACCEPT } from "./scripts/source-request-accept.js";

/** The consumer group run consumers read the run streams through (one group of that name per shard's stream). */
export const RUN_GROUP = "runs";

/** How long, and how many, ids of runs put in a stream are remembered (a redone fan-out adds none twice). */
const ONCE_TTL_MS = 10 * 60_000;
const ONCE_KEEP = 100_000;
/** Entries and parked runs the adoption of the pre-shard run stream moves per step. */
const ADOPT_BATCH = 500;

/** A run to put in the stream: its user, its job (JSON of a queue/catalog.ts sourceRunJob) and, for dedupe, an id. */
export interface RunStreamInput {
  readonly userId: string;
  readonly json: string;
  readonly id?: string;
}

/** What became of a run offered to the stream. */
export type RunStreamStatus = "added" | "duplicate" | "parked";
const STATUS: Record<number, RunStreamStatus> = { 0: "duplicate", 1: "added", 2: "parked" };

/** A run read from the stream; `entryId` is its ref (`<shard>/<entry id>`, store/shard-streams.ts). */
export interface RunStreamEntry {
  readonly entryId: string;
  readonly userId: string;
  readonly json: string;
}

/**
 * What became of a request offered through `accept`: `admitted` with what became of its run, or
 * the first gate that refused it (`wait` in ms for the rates; the quota that was reached).
 */
export type RequestAcceptance =
  | { readonly admitted: true; readonly status: RunStreamStatus }
  | ({ readonly admitted: false } & GateVerdict);

/**
 * The run streams (docs/decisions.md "Source runs from a stream"): one per shard, in its users'
 * slot (`keys.shardRuns(i)`), holding source runs accepted and not yet settled, one entry each
 * (`u` user id, `j` job JSON), read by run consumers through one consumer group on each
 * (store/shard-streams.ts: read groups, leases, take-overs). An entry is deleted when its run
 * settles; nothing trims a stream otherwise. Each user has at most `perUser` entries in its shard's
 * stream (the shard's counts hash), so another user's run waits behind a bounded number of them;
 * the user's further runs are parked in order (a hash) and move into the stream one by one as the
 * user's entries settle, in the same atomic step as the acknowledgement. Because a user's rates,
 * quota and run stream share a slot, a queued HTTP request is admitted and added in one script
 * (`accept`).
 */
export class RunStream extends ShardStreams {
  private readonly addScript: ScriptCall;
  private readonly acceptScript: ScriptCall;
  private readonly ackScript: ScriptCall;
  private readonly healScript: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly keys: Keys,
    private readonly perUser: number,
    private readonly now: () => number = Date.now,
    /**
     * Where a consumer's blocking reads go: a dedicated connection (and, on a cluster, how to open
     * one per further shard). Without it the stream only takes runs and reports stats.
     */
    reads?: { readonly blocking: RedisClient; readonly open?: (name: string) => RedisClient },
  ) {
    super(
      redis,
      reads?.blocking ?? redis,
      Array.from({ length: keys.shards }, (_, i) => keys.shardRuns(i)),
      RUN_GROUP,
      "run-reads",
      reads?.open,
    );
    this.addScript = defineScript(redis, RUN_STREAM_ADD);
    this.acceptScript = defineScript(redis, SOURCE_REQUEST_ACCEPT);
    this.ackScript = defineScript(redis, RUN_STREAM_ACK);
    this.healScript = defineScript(redis, RUN_STREAM_HEAL);
  }

  /** The keys of the run-stream scripts of a shard, in their order (stream, counts, parked, ends). */
  private shardKeys(shard: number): [string, string, string, string] {
    const k = this.keys;
    return [k.shardRuns(shard), k.shardRunCounts(shard), k.shardRunParked(shard), k.shardRunParkedEnds(shard)];
  }

  /**
   * Offers runs to the streams: one atomic step per shard (the runs of one user are in one);
   * returns what became of each, in order.
   */
  async add(runs: readonly RunStreamInput[]): Promise<RunStreamStatus[]> {
    if (runs.length === 0) return [];
    const byShardIndex = new Map<number, number[]>();
    runs.forEach((r, i) => {
      const shard = this.keys.shardOf(r.userId);
      const list = byShardIndex.get(shard);
      if (list) list.push(i);
      else byShardIndex.set(shard, [i]);
    });
    const out: RunStreamStatus[] = new Array(runs.length).fill("added");
    await Promise.all(
      [...byShardIndex].map(async ([shard, indexes]) => {
        const args: (string | number)[] = [this.perUser, this.now(), ONCE_TTL_MS, ONCE_KEEP];
        for (const i of indexes) {
          const r = runs[i] as RunStreamInput;
          args.push(r.id ?? "", r.userId, r.json);
        }
        const [stream, counts, parked, ends] = this.shardKeys(shard);
        const res = (await this.addScript([stream, counts, this.keys.shardRunOnce(shard), parked, ends], args)) as number[];
        indexes.forEach((i, at) => {
          out[i] = STATUS[res[at] ?? 1] ?? "added";
        });
      }),
    );
    return out;
  }

  /**
   * A queued HTTP source request's rates, quota and run in one atomic step
   * (store/scripts/source-request-accept.ts): the run is added (or parked) only when every gate
   * let the request through.
   */
  async accept(userId: string, json: string, gate: RequestGate): Promise<RequestAcceptance> {
    const [stream, counts, parked, ends] = this.shardKeys(this.keys.shardOf(userId));
    const { keys, args } = gateKeysAndArgs(gate, this.now());
    const res = (await this.acceptScript([...keys, stream, counts, parked, ends], [...args, this.perUser, userId, json])) as unknown[];
    const status = Number(res[3]);
    if (status > 0) return { admitted: true, status: STATUS[status] ?? "added" };
    return { admitted: false, ...gateVerdict(res) };
  }

  /** Reads up to `count` new entries per shard of `group` (`readGroups()`), waiting up to `blockMs`. */
  async read(group: ReadGroup, consumer: string, count: number, blockMs: number): Promise<RunStreamEntry[]> {
    return parse(await this.readGroup(group, consumer, count, blockMs));
  }

  /**
   * Acknowledges and deletes settled runs (one step per shard); each user's oldest parked run takes
   * the place of one of theirs.
   */
  async ack(entries: readonly RunStreamEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const users = new Map(entries.map((e) => [e.entryId, e.userId]));
    await Promise.all(
      [...byShard(entries.map((e) => e.entryId))].map(([shard, ids]) => {
        const args: string[] = [RUN_GROUP];
        for (const id of ids) args.push(id, users.get(entryRef(shard, id)) ?? "");
        return this.ackScript(this.shardKeys(shard), args);
      }),
    );
  }

  /**
   * Once a shard's stream is empty, clears counts left by drift there and moves parked runs in (up
   * to each user's share); returns how many moved over every shard.
   */
  async heal(): Promise<number> {
    const moved = await Promise.all(this.all().map((shard) => this.healScript(this.shardKeys(shard), [this.perUser])));
    return moved.reduce<number>((sum, n) => sum + Math.max(0, Number(n)), 0);
  }

  /** One XAUTOCLAIM round on one shard's stream (store/shard-streams.ts `takeOver`), as runs. */
  async takeOverRuns(shard: number, consumer: string, minIdleMs: number, cursor: string, count: number) {
    const { entries, next } = await this.takeOver(shard, consumer, minIdleMs, cursor, count);
    return { entries: parse(entries), next };
  }

  /** Parked runs wait too: counted with the entries not yet read in the queue monitor's stats. */
  protected override waitingBeside(shard: number): string {
    return this.keys.shardRunParked(shard);
  }

  /**
   * Moves what the one run stream of earlier versions (`keys.legacyRunStream()`, under the global
   * tag) still holds into the shard streams: its entries, then its parked runs, each added under an
   * id of its own (`legacy:<entry id>`, `legacy-parked:<field>`), so a step redone after a crash
   * adds nothing twice, and deleted from the old stream only once added. An entry a process of the
   * earlier version was running is run again (at least once). Returns how many runs moved; cheap
   * (two reads) once the old stream is empty.
   */
  async adoptLegacy(): Promise<number> {
    const k = this.keys;
    const stream = k.legacyRunStream();
    const parkedKey = k.legacyRunParked();
    let moved = 0;
    for (;;) {
      const entries = (await this.redis.xrange(stream, "-", "+", "COUNT", ADOPT_BATCH)) as StreamEntries;
      if (entries.length === 0) break;
      // Entries of the old stream keep their own ids here (parse names them by nothing else).
      const runs = parse(entries);
      await this.add(runs.filter((r) => r.userId && r.json).map((r) => ({ id: `legacy:${r.entryId}`, userId: r.userId, json: r.json })));
      const ids = entries.map(([id]) => id);
      // A failed delete would have the next read find the same entries again: it throws. (An old
      // stream that never had a consumer group answers the XACK with NOGROUP: nothing to do.)
      const replies =
        (await this.redis
          .pipeline()
          .xack(stream, RUN_GROUP, ...ids)
          .xdel(stream, ...ids)
          .exec()) ?? [];
      const failed = replies.find(([err]) => err && !/NOGROUP/.test(err.message));
      if (failed) throw failed[0];
      moved += entries.length;
    }
    for (let cursor = "0"; ; ) {
      const [next, flat] = await this.redis.hscan(parkedKey, cursor, "COUNT", ADOPT_BATCH);
      const parked: { field: string; user: string; seq: number; job: string }[] = [];
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const field = flat[i] as string;
        const at = field.lastIndexOf(" ");
        parked.push({ field, user: field.slice(0, at), seq: Number(field.slice(at + 1)), job: flat[i + 1] as string });
      }
      // A user's parked runs keep their order (the seq).
      parked.sort((a, b) => (a.user === b.user ? a.seq - b.seq : a.user < b.user ? -1 : 1));
      if (parked.length > 0) {
        await this.add(parked.map((p) => ({ id: `legacy-parked:${p.field}`, userId: p.user, json: p.job })));
        await this.redis.hdel(parkedKey, ...parked.map((p) => p.field));
        moved += parked.length;
      }
      cursor = next;
      if (cursor === "0") break;
    }
    if (moved > 0) await this.redis.del(k.legacyRunStreamCounts(), k.legacyRunParkedEnds(), k.legacyRunStreamOnce());
    return moved;
  }
}

/** Entries as XREADGROUP / XAUTOCLAIM return them (named by refs); one without a user or job is kept with empty fields (the caller acknowledges it). */
function parse(raw: StreamEntries): RunStreamEntry[] {
  return raw.map(([entryId, fields]) => {
    let userId = "";
    let json = "";
    for (let at = 0; at + 1 < fields.length; at += 2) {
      if (fields[at] === "u") userId = fields[at + 1] ?? "";
      else if (fields[at] === "j") json = fields[at + 1] ?? "";
    }
    return { entryId, userId, json };
  });
}

/** Entries in every shard's run stream, read or not (tests, the bench, tools: one XLEN per shard). */
export async function runStreamLength(redis: RedisClient, keys: Keys): Promise<number> {
  const lengths = await Promise.all(Array.from({ length: keys.shards }, (_, i) => redis.xlen(keys.shardRuns(i))));
  return lengths.reduce((sum, n) => sum + n, 0);
}
