import { emitterGlob, newId } from "../domain/ids.js";
import { limitReached, listenerLimitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import type { SubscriptionFilter } from "../domain/subscription-filter.js";
import { AUTO_SUBSCRIPTION_CREATE } from "./scripts/auto-subscription-create.js";
import { normalizeChannel } from "./keys.js";
import { parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { MATCH_SUBSCRIPTIONS } from "./scripts/match-subscriptions.js";
import { SUBSCRIPTION_CREATE } from "./scripts/subscription-create.js";

export interface SubscriptionRecord {
  id: string;
  emitter_id: string;
  listener_id: string;
  event_name: string;
  /** Matched against each event's payload (SPEC §12); null when none. Last in the stored JSON (SUBSCRIPTION_CREATE relies on it). */
  filter: SubscriptionFilter | null;
}

export interface AutoSubscriptionRecord {
  id: string;
  listener_id: string;
  event_name: string;
}

/** The idempotency key of a subscription: "" and "default" are the same channel. */
const tripleKey = (emitter: string, listener: string, eventName: string) => `${emitter}\n${listener}\n${normalizeChannel(eventName)}`;

/** A stored record; those written before filters existed read as `filter: null`. */
function readRecord(raw: string | null | undefined): SubscriptionRecord | undefined {
  const record = parseStored<SubscriptionRecord>(raw);
  if (record && record.filter === undefined) record.filter = null;
  return record;
}

/** Events a listener's subscription filters kept from it (one fan-out batch's, or in all). */
export interface FilteredCount {
  readonly userId: string;
  readonly listenerId: string;
  readonly count: number;
  /** The latest such event and when fan-out met it. */
  readonly lastEventId: string;
  readonly lastAtMs: number;
}

/**
 * Subscriptions of each user. Besides the records, a set per (emitter-or-glob, channel) indexes
 * them so fan-out never scans every subscription.
 */
export class SubscriptionStore {
  private readonly createScript: ScriptCall;
  private readonly matchScript: ScriptCall;
  private readonly createAutoScript: ScriptCall;

  constructor(
    private readonly ctx: StoreContext,
    /** Uses subscriptions, listenersPerEmitter and autoSubscriptions. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    // Defined up front, never lazily: an auto-pipeline already open in the same tick would lack
    // the command (ioredis copies custom commands into a pipeline when it is created).
    this.matchScript = defineScript(ctx.redis, MATCH_SUBSCRIPTIONS);
    this.createScript = defineScript(ctx.redis, SUBSCRIPTION_CREATE);
    this.createAutoScript = defineScript(ctx.redis, AUTO_SUBSCRIPTION_CREATE);
  }

  /**
   * Creates the subscription, or returns the existing one with the same triple: with its filter
   * replaced when `filter` is given (null clears it), as it was when `filter` is undefined. The user's
   * subscription count and the listeners one event of the emitter would reach are limited; both are
   * checked in the same atomic step as the write (store/subscription-create-lua.ts), 429
   * `limit_exceeded` past them.
   */
  async create(
    userId: string,
    emitterId: string,
    listenerId: string,
    eventName: string,
    filter?: SubscriptionFilter | null,
  ): Promise<SubscriptionRecord> {
    const { keys } = this.ctx;
    // Key order matters: the script swaps the filter of an existing record by cutting at its last key.
    const record: SubscriptionRecord = {
      id: newId("sub_", this.ctx.randomBytes),
      emitter_id: emitterId,
      listener_id: listenerId,
      event_name: eventName,
      filter: filter ?? null,
    };
    const glob = emitterGlob(emitterId);
    const exact = keys.subscriptionIndex(userId, emitterId, eventName);
    const [outcome, value] = (await this.createScript(
      [
        keys.subscriptionTriples(userId),
        keys.subscriptions(userId),
        keys.subscriptionOrder(userId),
        exact,
        glob ? keys.subscriptionIndex(userId, glob, eventName) : exact,
      ],
      [
        tripleKey(emitterId, listenerId, eventName),
        record.id,
        JSON.stringify(record),
        this.ctx.now(),
        this.limits.subscriptions,
        this.limits.listenersPerEmitter,
        filter === undefined ? "" : JSON.stringify(filter),
      ],
    )) as [string, string];
    if (outcome === "subscriptions") throw limitReached("subscriptions", Number(value), this.limits.subscriptions);
    if (outcome === "listeners") {
      throw listenerLimitReached(emitterId, normalizeChannel(eventName), Number(value), this.limits.listenersPerEmitter);
    }
    return readRecord(value) ?? record;
  }

  async get(userId: string, id: string): Promise<SubscriptionRecord | undefined> {
    return readRecord(await this.ctx.redis.hget(this.ctx.keys.subscriptions(userId), id));
  }

  /** Every subscription of the user, newest first like every list (not paginated). */
  async list(userId: string): Promise<SubscriptionRecord[]> {
    const { redis, keys } = this.ctx;
    const ids = await redis.zrevrange(keys.subscriptionOrder(userId), 0, -1);
    if (ids.length === 0) return [];
    const raws = await redis.hmget(keys.subscriptions(userId), ...ids);
    return raws.map(readRecord).filter((s): s is SubscriptionRecord => s !== undefined);
  }

  /** Deletes by triple; false when there was none. */
  async deleteTriple(userId: string, emitterId: string, listenerId: string, eventName: string): Promise<boolean> {
    const id = await this.ctx.redis.hget(this.ctx.keys.subscriptionTriples(userId), tripleKey(emitterId, listenerId, eventName));
    if (!id) return false;
    const record = await this.get(userId, id);
    await this.remove(userId, record ?? { id, emitter_id: emitterId, listener_id: listenerId, event_name: eventName, filter: null });
    return true;
  }

  /**
   * Adds a fan-out batch's filtered events to their listeners' counts: two commands per listener,
   * sent with the tick's other commands (auto-pipelining); no read.
   */
  async recordFiltered(counts: readonly FilteredCount[]): Promise<void> {
    const key = this.ctx.keys.listenerFiltered;
    await Promise.all(
      counts.flatMap((c) => [
        this.ctx.redis.hincrby(key(c.userId), c.listenerId, c.count),
        this.ctx.redis.hset(key(c.userId), `${c.listenerId}:last`, `${c.lastEventId} ${c.lastAtMs}`),
      ]),
    );
  }

  /** The events a listener's subscription filters kept from it; undefined when none was. */
  async filteredOf(userId: string, listenerId: string): Promise<Omit<FilteredCount, "userId" | "listenerId"> | undefined> {
    const [count, last] = await this.ctx.redis.hmget(this.ctx.keys.listenerFiltered(userId), listenerId, `${listenerId}:last`);
    if (!count || !last) return undefined;
    const space = last.indexOf(" ");
    return { count: Number(count), lastEventId: last.slice(0, space), lastAtMs: Number(last.slice(space + 1)) };
  }

  /** Removes every subscription that names `id` as emitter or listener (source, webhook or workflow deletion). */
  async deleteNaming(userId: string, id: string): Promise<number> {
    await this.ctx.redis.hdel(this.ctx.keys.listenerFiltered(userId), id, `${id}:last`);
    const all = await this.list(userId);
    const doomed = all.filter((s) => s.emitter_id === id || s.listener_id === id);
    for (const s of doomed) await this.remove(userId, s);
    const autos = await this.listAuto(userId);
    for (const a of autos.filter((x) => x.listener_id === id)) await this.ctx.redis.hdel(this.ctx.keys.autoSubscriptions(userId), a.id);
    return doomed.length;
  }

  private async remove(userId: string, s: SubscriptionRecord): Promise<void> {
    const { redis, keys } = this.ctx;
    await redis
      .multi()
      .hdel(keys.subscriptions(userId), s.id)
      .zrem(keys.subscriptionOrder(userId), s.id)
      .hdel(keys.subscriptionTriples(userId), tripleKey(s.emitter_id, s.listener_id, s.event_name))
      .srem(keys.subscriptionIndex(userId, s.emitter_id, s.event_name), s.id)
      .exec();
  }

  /**
   * The subscriptions matching an event: exact emitter and the emitter's glob, on the event's
   * channel. One script call (SUNION + HMGET inside Redis), however many subscriptions the user has.
   */
  async matching(userId: string, emitterId: string, channel: string): Promise<SubscriptionRecord[]> {
    return (await this.matchingMany([{ userId, emitterId, channel }]))[0] ?? [];
  }

  /**
   * `matching` for many (user, emitter, channel) lookups at once: every lookup is one script call,
   * issued together on the auto-pipelined connection, so a fan-out batch pays a single round trip
   * (plain calls: an explicit ioredis pipeline costs more to build than it saves here).
   */
  async matchingMany(lookups: readonly { userId: string; emitterId: string; channel: string }[]): Promise<SubscriptionRecord[][]> {
    if (lookups.length === 0) return [];
    const { keys } = this.ctx;
    const replies = await Promise.all(
      lookups.map(({ userId, emitterId, channel }) => {
        const glob = emitterGlob(emitterId);
        const exact = keys.subscriptionIndex(userId, emitterId, channel);
        const globIndex = glob ? keys.subscriptionIndex(userId, glob, channel) : exact;
        return this.matchScript([keys.subscriptions(userId), exact, globIndex], []) as Promise<(string | null)[] | null>;
      }),
    );
    return replies.map((raws) => (raws ?? []).map(readRecord).filter((s): s is SubscriptionRecord => s !== undefined));
  }

  /**
   * Creates an auto-subscription, or returns the existing one with the same listener and channel;
   * at most `autoSubscriptions` per user, checked atomically with the write
   * (store/auto-subscription-create-lua.ts).
   */
  async createAuto(userId: string, listenerId: string, eventName: string): Promise<AutoSubscriptionRecord> {
    const record: AutoSubscriptionRecord = { id: newId("asub_", this.ctx.randomBytes), listener_id: listenerId, event_name: eventName };
    const [outcome, value] = (await this.createAutoScript(
      [this.ctx.keys.autoSubscriptions(userId)],
      [listenerId, normalizeChannel(eventName), record.id, JSON.stringify(record), this.limits.autoSubscriptions],
    )) as [string, string];
    if (outcome === "limit") throw limitReached("auto_subscriptions", Number(value), this.limits.autoSubscriptions);
    return parseStored<AutoSubscriptionRecord>(value) ?? record;
  }

  async listAuto(userId: string): Promise<AutoSubscriptionRecord[]> {
    const all = await this.ctx.redis.hvals(this.ctx.keys.autoSubscriptions(userId));
    return all.map((r) => parseStored<AutoSubscriptionRecord>(r)).filter((a): a is AutoSubscriptionRecord => a !== undefined);
  }

  /** Turns the user's auto-subscriptions into real subscriptions for a new emitter. */
  async applyAuto(userId: string, emitterId: string): Promise<SubscriptionRecord[]> {
    const autos = await this.listAuto(userId);
    const created: SubscriptionRecord[] = [];
    for (const a of autos) {
      if (a.listener_id === emitterId) continue;
      created.push(await this.create(userId, emitterId, a.listener_id, a.event_name));
    }
    return created;
  }
}
