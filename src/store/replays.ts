import type { DeliverySelectors } from "../domain/delivery-query.js";
import { newId } from "../domain/ids.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { LOCK_RELEASE } from "./scripts/lock-release.js";
import { LOCK_RENEW } from "./scripts/lock-renew.js";
import { REPLAY_ADVANCE } from "./scripts/replay-advance.js";
import { REPLAY_CREATE } from "./scripts/replay-create.js";

/** How long a bulk replay (its record, plan and outcome sets) is kept after it was created. */
export const REPLAY_TTL_MS = 24 * 3600 * 1000;

/** Plan entries written per command. */
const PLAN_WRITE_CHUNK = 1000;
/** Replays of the previous version's registry moved into the per-user sets per look. */
const LEGACY_MOVE = 100;

/** A bulk replay as stored (SPEC §12). */
export interface ReplayState {
  readonly id: string;
  readonly userId: string;
  readonly webhookId: string;
  readonly selectors: DeliverySelectors;
  /** The selectors as one string (domain/delivery-query.ts selectorsIdentity). */
  readonly identity: string;
  /** Deliveries the selectors matched when the replay was asked for: the length of its plan. */
  readonly matched: number;
  /** Plan entries examined so far (the next one to queue). */
  readonly cursor: number;
  /** Deliveries this replay re-queued. */
  readonly queued: number;
  /** Plan entries no longer failed when their turn came (another replay or a retry took them, or they left the log). */
  readonly skipped: number;
  /** Epoch seconds. */
  readonly createdAt: number;
  readonly expiresAt: number;
}

/** A replay still queueing, as the driver's registry names it. */
export interface ReplayRef {
  readonly userId: string;
  readonly id: string;
}

/**
 * Bulk replays: each one's record (a hash), its plan (the list of matched delivery ids, written
 * before the replay is acknowledged, so a daemon restarted mid-replay goes on from its cursor),
 * the sets of its deliveries that settled (delivered or failed, written by the attempt log as they
 * settle), the replays still queueing (a set per user, and the users in the order of their turns
 * at the replay rate) and the lease of the process that drives them.
 */
export class ReplayStore {
  private readonly create: ScriptCall;
  private readonly advanceScript: ScriptCall;
  private readonly renew: ScriptCall;
  private readonly release: ScriptCall;

  constructor(private readonly ctx: StoreContext) {
    this.create = defineScript(ctx.redis, REPLAY_CREATE);
    this.advanceScript = defineScript(ctx.redis, REPLAY_ADVANCE);
    this.renew = defineScript(ctx.redis, LOCK_RENEW);
    this.release = defineScript(ctx.redis, LOCK_RELEASE);
  }

  /**
   * Records a replay of `plan` (delivery ids) and registers it for the driver, unless an identical
   * one (same webhook, same `identity` of selectors) is still queueing: then that one's id and
   * matched count are returned and nothing new is planned.
   */
  async start(
    userId: string,
    webhookId: string,
    identity: string,
    selectors: DeliverySelectors,
    plan: readonly string[],
  ): Promise<{ id: string; matched: number }> {
    const { redis, keys } = this.ctx;
    const id = newId("rpl_", this.ctx.randomBytes);
    const nowMs = this.ctx.now();
    const planKey = keys.replayPlan(userId, id);
    // The plan goes first, with a TTL of its own: a crash before the record leaves no orphan.
    for (let i = 0; i < plan.length; i += PLAN_WRITE_CHUNK) {
      await redis
        .multi()
        .rpush(planKey, ...plan.slice(i, i + PLAN_WRITE_CHUNK))
        .pexpire(planKey, REPLAY_TTL_MS)
        .exec();
    }
    const standing = String(
      await this.create(
        [keys.replayRunning(userId, webhookId, identity), keys.replay(userId, id), planKey],
        [
          id,
          REPLAY_TTL_MS,
          "webhook_id",
          webhookId,
          "selectors",
          JSON.stringify(selectors),
          "identity",
          identity,
          "matched",
          plan.length,
          "cursor",
          0,
          "queued",
          0,
          "skipped",
          0,
          "created_at",
          epochSeconds(nowMs),
          "expires_at",
          epochSeconds(nowMs + REPLAY_TTL_MS),
        ],
      ),
    );
    // Registered after the record (cross-slot): an identical request registers the running one
    // again, so a crash between the two steps is repaired by the client's retry.
    await this.register({ userId, id: standing }, nowMs);
    if (standing === id) return { id, matched: plan.length };
    const running = await this.get(userId, standing);
    return { id: standing, matched: running?.matched ?? 0 };
  }

  async get(userId: string, id: string): Promise<ReplayState | undefined> {
    const h = await this.ctx.redis.hgetall(this.ctx.keys.replay(userId, id));
    if (h.webhook_id === undefined) return undefined;
    return {
      id,
      userId,
      webhookId: h.webhook_id,
      selectors: parseStored<DeliverySelectors>(h.selectors) ?? {},
      identity: h.identity ?? "",
      matched: Number(h.matched ?? 0),
      cursor: Number(h.cursor ?? 0),
      queued: Number(h.queued ?? 0),
      skipped: Number(h.skipped ?? 0),
      createdAt: Number(h.created_at ?? 0),
      expiresAt: Number(h.expires_at ?? 0),
    };
  }

  /** How many of the replay's deliveries settled, by outcome. */
  async outcomes(userId: string, id: string): Promise<{ delivered: number; failed: number }> {
    const { keys, redis } = this.ctx;
    const [delivered, failed] = await Promise.all([
      redis.scard(keys.replayOutcome(userId, id, "delivered")),
      redis.scard(keys.replayOutcome(userId, id, "failed")),
    ]);
    return { delivered, failed };
  }

  /** Which of `deliveryIds` already settled in this replay (queued by it before a crash). */
  async settledAmong(userId: string, id: string, deliveryIds: readonly string[]): Promise<Set<string>> {
    if (deliveryIds.length === 0) return new Set();
    const { keys, redis } = this.ctx;
    const [d, f] = await Promise.all([
      redis.smismember(keys.replayOutcome(userId, id, "delivered"), ...deliveryIds),
      redis.smismember(keys.replayOutcome(userId, id, "failed"), ...deliveryIds),
    ]);
    return new Set(deliveryIds.filter((_, i) => d[i] === 1 || f[i] === 1));
  }

  /** Up to `count` plan entries from `from`. */
  planChunk(userId: string, id: string, from: number, count: number): Promise<string[]> {
    return this.ctx.redis.lrange(this.ctx.keys.replayPlan(userId, id), from, from + count - 1);
  }

  /**
   * Counts `examined` plan entries from the replay's cursor as done (REPLAY_ADVANCE); false when
   * the cursor had moved meanwhile (another driver counted them).
   */
  async advance(r: ReplayState, examined: number, queued: number): Promise<boolean> {
    const { keys } = this.ctx;
    const next = Number(
      await this.advanceScript(
        [keys.replay(r.userId, r.id), keys.replayRunning(r.userId, r.webhookId, r.identity)],
        [r.cursor, examined, queued, examined - queued, r.id],
      ),
    );
    return next >= 0;
  }

  /**
   * Registers a replay for the driver: in its user's set of replays still queueing, then the user
   * in the turns (in that order: `retire` relies on it). A user already waiting keeps its place.
   */
  private async register(ref: ReplayRef, atMs: number): Promise<void> {
    const { redis, keys } = this.ctx;
    await redis.zadd(keys.userReplaysQueueing(ref.userId), "NX", atMs, ref.id);
    await redis.zadd(keys.replayTurns(), "NX", atMs, ref.userId);
  }

  /**
   * Up to `count` users with replays still queueing, the least recently served first (a user's
   * turn ends with `served`). Replays registered by the previous version (one registry of every
   * user's replays, first come first served) are moved in first.
   */
  async turns(count: number): Promise<string[]> {
    const { redis, keys } = this.ctx;
    const legacy = await redis.zrange(keys.replaysQueueing(), 0, LEGACY_MOVE - 1, "WITHSCORES");
    for (let i = 0; i + 1 < legacy.length; i += 2) {
      const [userId, id] = String(legacy[i]).split(" ");
      if (userId && id) await this.register({ userId, id }, Number(legacy[i + 1]));
      await redis.zrem(keys.replaysQueueing(), String(legacy[i]));
    }
    return redis.zrange(keys.replayTurns(), 0, count - 1);
  }

  /** The user's oldest replays still queueing, up to `count`. */
  async queueingOf(userId: string, count: number): Promise<ReplayRef[]> {
    const ids = await this.ctx.redis.zrange(this.ctx.keys.userReplaysQueueing(userId), 0, count - 1);
    return ids.map((id) => ({ userId, id }));
  }

  /** Ends a user's turn: it goes behind every user still waiting for one (if it has replays left). */
  async served(userId: string, atMs: number): Promise<void> {
    await this.ctx.redis.zadd(this.ctx.keys.replayTurns(), "XX", atMs, userId);
  }

  /** Takes a replay out of its user's set (queued to its end, or expired); the user's last one takes the user out of the turns. */
  async done(ref: ReplayRef): Promise<void> {
    const { redis, keys } = this.ctx;
    await redis.zrem(keys.userReplaysQueueing(ref.userId), ref.id);
    if ((await redis.zcard(keys.userReplaysQueueing(ref.userId))) === 0) await this.retire(ref.userId);
  }

  /**
   * Takes a user without replays left out of the turns. The user's set and the turns sit in two
   * slots, so this cannot be one step: the user is taken out first and put back if a replay was
   * registered meanwhile (registration writes the set before the turns), so none is left unseen.
   */
  async retire(userId: string): Promise<void> {
    const { redis, keys } = this.ctx;
    await redis.zrem(keys.replayTurns(), userId);
    if ((await redis.zcard(keys.userReplaysQueueing(userId))) > 0) await redis.zadd(keys.replayTurns(), "NX", this.ctx.now(), userId);
  }

  /** Takes the driver lease for `ttlMs` if nobody holds it, or extends it if `owner` does. */
  async lease(owner: string, ttlMs: number): Promise<boolean> {
    const key = this.ctx.keys.replayLease();
    if (Number(await this.renew([key], [owner, ttlMs])) === 1) return true;
    return (await this.ctx.redis.set(key, owner, "PX", ttlMs, "NX")) === "OK";
  }

  async releaseLease(owner: string): Promise<void> {
    await this.release([this.ctx.keys.replayLease()], [owner]);
  }
}
