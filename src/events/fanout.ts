import type { RedisClient } from "../store/context.js";
import type { DirectDelivery } from "../delivery/direct.js";
import type { DeliveryJobQueue } from "../delivery/jobs.js";
import type { DeliveryJob, SourceRunJob } from "../queue/catalog.js";
import { mayAttemptDirectly } from "../domain/delivery-plan.js";
import { FILTER_BUDGET_DEFAULTS, type FilterBudgetLimits, FilterBudgets } from "../domain/filter-budget.js";
import { FilterPredicates } from "../domain/subscription-filter.js";
import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import { RetryLog } from "../observability/retry-log.js";
import type { Keys } from "../store/keys.js";
import type { AckToken } from "../store/replica-ack.js";
import { FANOUT_GROUP, OutboxStream, type ReadGroup, type StreamEntries } from "../store/outbox-stream.js";
import type { FilteredCount, SubscriptionStore } from "../store/subscriptions.js";
import { type FanoutOrigin, type FanoutPlan, matchedListeners, type OverBudgetEvent, planFanout, planLookups } from "./fanout-plan.js";
import { type OutboxEntry, parseOutboxEntry } from "./outbox.js";

export { FANOUT_GROUP };

/** How often a fan-out worker prunes, and how long a consumer must have been idle to go. */
const PRUNE_EVERY_MS = 10 * 60_000;
const PRUNE_IDLE_MS = 60 * 60_000;

export interface FanoutDeps {
  /** A dedicated connection: XREADGROUP blocks it (the first read group's; on one node the only one). */
  blocking: RedisClient;
  /**
   * Opens a dedicated connection for each further read group: on a Redis Cluster each shard
   * outbox is read by its own blocking XREADGROUP (store/outbox-stream.ts). Without it `blocking`
   * is duplicated. Unused on one node.
   */
  openBlocking?: (name: string) => RedisClient;
  redis: RedisClient;
  keys: Keys;
  subscriptions: SubscriptionStore;
  /** Where deliveries that do not go direct are queued (with the budget their origin leaves them). */
  deliveryJobs: Pick<DeliveryJobQueue, "addAll">;
  /** Where deliveries to source listeners are made durable (runtime/run-intake.ts: the run stream). */
  sourceRuns: SourceRunSink;
  logger: Logger;
  metrics: Metrics;
  consumer: string;
  /** Pending entries idle longer than this are taken over from a dead consumer. */
  claimIdleMs: number;
  batchSize?: number;
  /**
   * Makes first attempts directly (delivery/direct.ts); without it every delivery is a queued
   * job. Never used for entries taken over from a dead consumer: those are redone through the
   * queue, which reads each delivery's attempt record first.
   */
  direct?: DirectDelivery;
  /**
   * REDIS_MIN_REPLICAS_ACK > 0 (SPEC §8): the writes an entry caused (its jobs, its source runs,
   * the retry jobs of its direct attempts) must be on replicas before the entry is acknowledged,
   * since the queue, the run stream and the outbox may sit on different masters of a Cluster, and
   * a master that fails over may lose what a replica had not received. `begin` before the writes,
   * `confirm` after them (store/replica-ack.ts); an entry not confirmed stays pending and is redone.
   */
  replicas?: { begin(): AckToken; confirm(token: AckToken): Promise<void> };
  /** What subscription filters may spend per event and per emitting user (domain/filter-budget.ts); default FILTER_BUDGET_DEFAULTS. */
  filterBudget?: FilterBudgetLimits;
  /** Tells users whose events' filters ran out (events/filter-budget-report.ts); never rejects. Without it they are only counted. */
  overBudget?: { report(events: readonly OverBudgetEvent[]): Promise<void> };
}

/** Takes source runs; a run whose id it took before (a redone entry) is not added twice. */
export interface SourceRunSink {
  addAll(runs: readonly { readonly id: string; readonly data: SourceRunJob }[]): Promise<unknown>;
}

/** Entries named by refs (`<shard>/<entry id>`, store/outbox-stream.ts): entry ids are unique per shard only. */
type XEntries = StreamEntries;

/**
 * Reads the shard outboxes through a consumer group on each (one loop per read group,
 * store/outbox-stream.ts: one blocking XREADGROUP over every shard on one Redis node, one per shard
 * on a cluster; a user's events are all in one shard, read in order by one loop) and turns each
 * event into one delivery per matching listener: a first attempt made right here while a direct slot is free (delivery/direct.ts), else
 * a job. Jobs have deterministic ids, so an entry redone after a crash (taken over with XAUTOCLAIM,
 * always through the queue) adds nothing twice. An entry is acknowledged and deleted only once its
 * jobs exist and its direct attempts have settled.
 */
export class FanoutWorker {
  private running = false;
  private loops: Promise<void>[] = [];
  private lastPrune = 0;
  private lastLease = 0;
  /**
   * Entries whose direct first attempts are in flight, with their settlement. They stay pending
   * in the group (their idle time renewed, so no consumer takes them over) until it resolves.
   */
  private readonly held = new Map<string, Promise<void>>();
  /** Held entries whose attempts settled, acknowledged together once this event-loop turn ends. */
  private settled: string[] = [];
  private readonly flushes = new Set<Promise<void>>();

  private readonly outbox: OutboxStream;

  /** Subscription filters compiled once per process, by their JSON text (SPEC §12). */
  private readonly filters = new FilterPredicates();
  /** What their evaluations may spend: per event, and per emitting user across this process's loops. */
  private readonly filterBudgets: FilterBudgets;

  constructor(private readonly d: FanoutDeps) {
    this.outbox = new OutboxStream(d.redis, d.blocking, d.keys, d.openBlocking);
    this.filterBudgets = new FilterBudgets(d.filterBudget ?? FILTER_BUDGET_DEFAULTS);
  }

  /** Removes consumers idle for `minIdleMs` with nothing pending (store/scripts/prune-consumers.ts); returns how many. */
  async pruneConsumers(minIdleMs = PRUNE_IDLE_MS): Promise<number> {
    return this.outbox.pruneConsumers(this.d.consumer, minIdleMs);
  }

  private ensureGroup(): Promise<void> {
    return this.outbox.ensureGroup();
  }

  async start(): Promise<void> {
    await this.ensureGroup();
    // Listed in XINFO CONSUMERS from the start (a blocked XREADGROUP on an empty outbox does not
    // register it), so operators and the bench can see which processes consume.
    await this.outbox.createConsumer(this.d.consumer);
    this.running = true;
    const groups = this.outbox.readGroups();
    this.loops = groups.map((group, at) => this.run(group, at === 0));
  }

  /**
   * The loop of one read group: takes over its shards' entries left by dead consumers, reads, fans
   * out. The first group's loop also renews the leases of held entries and prunes consumers.
   */
  private async run(group: ReadGroup, first: boolean): Promise<void> {
    const { logger } = this.d;
    /** Entries fanned out by the last round, acknowledged in the same write as the next read. */
    let toAck: string[] = [];
    let lastClaim = 0;
    const retries = new RetryLog(logger, "fan-out loop error; retrying", { level: "error" });
    while (this.running) {
      try {
        if (Date.now() - lastClaim > Math.min(this.d.claimIdleMs, 5000)) {
          lastClaim = Date.now();
          await this.reclaim(group.shards);
        }
        if (first && this.held.size > 0 && Date.now() - this.lastLease > this.d.claimIdleMs / 3) {
          this.lastLease = Date.now();
          await this.renewLease();
        }
        if (first && Date.now() - this.lastPrune > PRUNE_EVERY_MS) {
          this.lastPrune = Date.now();
          const removed = await this.pruneConsumers();
          if (removed > 0) logger.info({ removed }, "fan-out: removed consumers of stopped processes");
        }
        // XACK + XDEL of the previous round and the next XREADGROUP share one round trip; Redis
        // runs them in order, so an entry is acknowledged only after its jobs were added.
        const acking = toAck;
        toAck = [];
        const entries = await this.outbox.ackAndRead(group, acking, this.d.consumer, this.d.batchSize ?? 200, 1000);
        if (entries.length > 0) {
          const token = this.d.replicas?.begin();
          toAck = await this.fanOut(entries, "fanout", token);
          if (token !== undefined && toAck.length > 0 && !(await this.replicated(token))) toAck = [];
        }
        retries.succeeded();
      } catch (err) {
        if (!this.running) break;
        // Redis lost its data (restart without persistence, FLUSHALL): recreate the group.
        if (/NOGROUP/.test((err as Error).message)) {
          await this.ensureGroup().catch(() => {});
          continue;
        }
        retries.failed(err);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // Stopping: acknowledge the last round, let direct attempts in flight settle and acknowledge
    // them (if this fails, the entries are taken over and redone).
    if (toAck.length > 0) await this.ack(toAck).catch(() => {});
    await Promise.all(this.held.values());
    await Promise.all(this.flushes);
  }

  /** Acknowledges settled entries, all of those of one event-loop turn in one write. */
  private ackSettled(entryId: string): void {
    this.settled.push(entryId);
    if (this.settled.length > 1) return;
    const flush = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => {
        const ids = this.settled;
        this.settled = [];
        return this.ack(ids);
      })
      .catch((err) => this.d.logger.warn({ err }, "fan-out: could not acknowledge delivered entries; they will be redone"))
      .finally(() => this.flushes.delete(flush));
    this.flushes.add(flush);
  }

  /** Resets the idle time of held entries (XCLAIM to ourselves, JUSTID: no delivery count). */
  private async renewLease(): Promise<void> {
    await this.outbox.renewLease(this.d.consumer, [...this.held.keys()]);
  }

  /**
   * Keeps `entryId` pending until `attempts` settle; then it is acknowledged, or, if one of them
   * could not be put in hand, left pending to be taken over and redone.
   */
  private hold(entryId: string, attempts: Promise<boolean>[], token: AckToken | undefined): void {
    this.held.set(
      entryId,
      Promise.all(attempts).then(async (oks) => {
        if (!oks.every(Boolean)) {
          this.held.delete(entryId);
          this.d.logger.warn({ entryId }, "fan-out: a direct delivery could not be put in hand; the event will be redone");
          return;
        }
        const confirmed = token === undefined || (await this.replicated(token));
        this.held.delete(entryId);
        if (confirmed) this.ackSettled(entryId);
      }),
    );
  }

  /** Whether the writes since `token` reached REDIS_MIN_REPLICAS_ACK replicas (if not, their entries are redone). */
  private async replicated(token: AckToken): Promise<boolean> {
    try {
      await this.d.replicas?.confirm(token);
      return true;
    } catch (err) {
      this.d.logger.warn({ err }, "fan-out: writes not confirmed by Redis replicas; their outbox entries stay pending and will be redone");
      return false;
    }
  }

  private ack(ids: readonly string[]): Promise<void> {
    return this.outbox.ack(ids);
  }

  /** Takes over entries a crashed consumer left pending on `shards` (XAUTOCLAIM on each shard outbox). */
  private async reclaim(shards: readonly number[]): Promise<void> {
    // The shards side by side (their first XAUTOCLAIMs share a round trip on one node), each in order.
    await Promise.all(
      shards.map(async (shard) => {
        let cursor = "0-0";
        for (let round = 0; round < 50; round++) {
          const { entries, next } = await this.outbox.takeOver(shard, this.d.consumer, this.d.claimIdleMs, cursor, 200);
          if (entries.length > 0) {
            this.d.logger.info({ count: entries.length, shard }, "fan-out: took over pending outbox entries");
            await this.process(entries);
          }
          cursor = next;
          if (cursor === "0-0") break;
        }
      }),
    );
  }

  /**
   * Fans out a batch taken over from another consumer (or read again) and acknowledges it. Its
   * delivery jobs have the `redo` origin: their deliveries may be done already.
   */
  async process(raw: XEntries): Promise<void> {
    const token = this.d.replicas?.begin();
    const ids = await this.fanOut(raw, "redo", token);
    if (token !== undefined && !(await this.replicated(token))) return;
    await this.ack(ids);
  }

  /**
   * Fans a batch out: parse, look the listeners up (one round trip for the whole batch; entries of
   * one emitter and channel share a lookup), plan (fanout-plan.ts) and dispatch. Returns the
   * entry ids the caller may acknowledge once this has returned.
   */
  private async fanOut(raw: XEntries, origin: FanoutOrigin, token?: AckToken): Promise<string[]> {
    const ids: string[] = [];
    const entries: OutboxEntry[] = [];
    for (const [entryId, fields] of raw) {
      ids.push(entryId);
      const e = parseOutboxEntry(entryId, fields);
      if (e) entries.push(e);
      else this.d.logger.warn({ entryId }, "fan-out: dropping malformed outbox entry");
    }
    const { lookups, lookupOf } = planLookups(entries);
    const listeners = (await this.d.subscriptions.matchingMany(lookups)).map((subs) => matchedListeners(subs, this.filters));
    const plan = planFanout(
      entries,
      lookupOf.map((at) => listeners[at] ?? []),
      origin,
      { budgets: this.filterBudgets, nowMs: Date.now() },
    );
    // One counter update per kind and batch (a labelled inc costs a label hash each time).
    for (const [kind, n] of Object.entries(plan.counts)) if (n > 0) this.d.metrics.fanoutJobs.inc({ listener_kind: kind }, n);
    for (const [kind, n] of Object.entries(plan.filtered))
      if (n > 0) this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "filtered" }, n);
    if (plan.filteredFor.length > 0) this.countFiltered(plan.filteredFor);
    let reporting: Promise<void> | undefined;
    if (plan.overBudgetEvents.length > 0) {
      for (const [kind, n] of Object.entries(plan.overBudget))
        if (n > 0) this.d.metrics.deliveries.inc({ listener_kind: kind, outcome: "filter_budget" }, n);
      for (const e of plan.overBudgetEvents) this.d.metrics.filterBudgetExceeded.inc({ limit: e.limit });
      // Beside the dispatch, not before it: the report must not delay the batch's deliveries.
      reporting = this.d.overBudget?.report(plan.overBudgetEvents);
    }
    const held = await this.dispatch(plan, origin, token);
    await reporting;
    return held.size === 0 ? ids : ids.filter((id) => !held.has(id));
  }

  /**
   * Adds the batch's filtered events to their listeners' counts (GET /v1/webhooks/{id} shows them):
   * one count per listener and batch. Not awaited: a count is bookkeeping for people, never part
   * of an entry's hand-over, and one lost to a Redis error is only logged.
   */
  private countFiltered(filteredFor: FanoutPlan["filteredFor"]): void {
    const byListener = new Map<string, FilteredCount>();
    const atMs = Date.now();
    for (const f of filteredFor) {
      const key = `${f.userId}\n${f.listenerId}`;
      const known = byListener.get(key);
      byListener.set(key, {
        userId: f.userId,
        listenerId: f.listenerId,
        count: (known?.count ?? 0) + 1,
        lastEventId: f.eventId,
        lastAtMs: atMs,
      });
    }
    this.d.subscriptions
      .recordFiltered([...byListener.values()])
      .catch((err) => this.d.logger.warn({ err }, "fan-out: could not count the events a subscription filter kept from a listener"));
  }

  /**
   * Hands the plan over: first attempts go direct while slots are free (never for a redo), the
   * rest become queued jobs. Returns the entries held until their direct attempts settle; every
   * other entry is handed over once this returns (if a job add fails, it throws before any entry
   * is held, and the whole batch is taken over and redone).
   */
  private async dispatch(plan: FanoutPlan, origin: FanoutOrigin, token: AckToken | undefined): Promise<ReadonlyMap<string, unknown>> {
    const direct = mayAttemptDirectly(origin) ? this.d.direct : undefined;
    let queued = plan.deliveries;
    const attemptsOf = new Map<string, Promise<boolean>[]>();
    if (direct && plan.deliveries.length > 0) {
      queued = [];
      const directByKind = { webhook: 0, workflow: 0 };
      for (let i = 0; i < plan.deliveries.length; i++) {
        const job = plan.deliveries[i] as DeliveryJob;
        const started = await direct.start(job);
        if (!started) {
          queued.push(job);
          continue;
        }
        directByKind[job.listenerKind]++;
        const entryId = plan.entryOf[i] as string;
        const list = attemptsOf.get(entryId);
        if (list) list.push(started.settled);
        else attemptsOf.set(entryId, [started.settled]);
      }
      for (const [kind, n] of Object.entries(directByKind)) if (n > 0) this.d.metrics.fanoutDirect.inc({ listener_kind: kind }, n);
    }
    await this.d.deliveryJobs.addAll(queued);
    if (plan.sourceRuns.length > 0) await this.d.sourceRuns.addAll(plan.sourceRuns);
    for (const [entryId, attempts] of attemptsOf) this.hold(entryId, attempts, token);
    return attemptsOf;
  }

  isRunning(): boolean {
    return this.running;
  }

  /** Stops the loops; the blocking reads return within their 1 s timeout. Idempotent. */
  async close(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.outbox.close();
  }
}
