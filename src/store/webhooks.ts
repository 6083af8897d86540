import type { PageRequest } from "../domain/pagination.js";
import { newId } from "../domain/ids.js";
import { ConflictError } from "../domain/errors.js";
import { limitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import { rotateSecrets } from "../domain/signing.js";
import { CAPPED_INSERT } from "./scripts/capped-insert.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import { LocalChanges } from "./local-changes.js";
import type { WebhookSettings } from "../domain/webhook-settings.js";
import { listenerChangeMessage } from "./keys.js";
import { PayloadStore } from "./payloads.js";
import { REPLACE_AND_PUBLISH } from "./scripts/replace-and-publish.js";

export interface WebhookRecord {
  id: string;
  user_id: string;
  name: string | null;
  description: string | null;
  url: string;
  active: boolean;
  created_at: number;
  updated_at: number;
  signing_secret: string;
  /** After a rotation: the replaced secret, in effect until `previous_secret_expires_at_ms`. */
  previous_signing_secret?: string | null;
  /** Epoch ms; absent on records never rotated. */
  previous_secret_expires_at_ms?: number | null;
  /** Per-webhook delivery settings (domain/webhook-settings.ts); absent on older records = the defaults. */
  headers?: Record<string, string> | null;
  timeout_ms?: number | null;
  retry_schedule?: string | null;
  rate_limit_per_second?: number | null;
}

export interface WebhookPatch {
  url?: string;
  name?: string | null;
  description?: string | null;
  active?: boolean;
  headers?: Record<string, string> | null;
  timeout_ms?: number | null;
  retry_schedule?: string | null;
  rate_limit_per_second?: number | null;
}

/**
 * Rounds of re-reading before a contended update gives up with 409. Each lost round is another
 * writer's win, and each writer wins once, so fewer concurrent writers to one webhook never get here.
 */
const MAX_MODIFY_ROUNDS = 50;
/** Attempt records read per MGET when a deleted webhook's records release their stored payloads. */
const HOLD_READS = 500;

export class WebhookStore {
  /**
   * The change message of every update or deletion made through this store, in this process;
   * other processes read it on `listenerChanges`.
   */
  readonly changes = new LocalChanges();

  private readonly cappedInsert: ScriptCall;
  private readonly replaceAndPublish: ScriptCall;
  private readonly payloads: PayloadStore;

  constructor(
    private readonly ctx: StoreContext,
    /** Uses webhooks. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    this.cappedInsert = defineScript(ctx.redis, CAPPED_INSERT);
    this.replaceAndPublish = defineScript(ctx.redis, REPLACE_AND_PUBLISH);
    this.payloads = new PayloadStore(ctx.redis, ctx.keys);
  }

  /**
   * Creates a webhook. At most `limits.webhooks` per user: past it, 429 `limit_exceeded`,
   * checked in the same atomic step as the write (store/capped-insert-lua.ts).
   */
  async create(
    userId: string,
    input: { url: string; name: string | null; description: string | null; signingSecret: string; settings?: Partial<WebhookSettings> },
  ): Promise<WebhookRecord> {
    const { keys } = this.ctx;
    const max = this.limits.webhooks;
    const now = this.ctx.now();
    const record: WebhookRecord = {
      id: newId("wh_", this.ctx.randomBytes),
      user_id: userId,
      name: input.name,
      description: input.description,
      url: input.url,
      active: true,
      created_at: epochSeconds(now),
      updated_at: epochSeconds(now),
      signing_secret: input.signingSecret,
      headers: input.settings?.headers ?? null,
      timeout_ms: input.settings?.timeout_ms ?? null,
      retry_schedule: input.settings?.retry_schedule ?? null,
      rate_limit_per_second: input.settings?.rate_limit_per_second ?? null,
    };
    const [status, count] = (await this.cappedInsert(
      [keys.webhook(userId, record.id), keys.webhooks(userId)],
      [record.id, now, JSON.stringify(record), max],
    )) as [number, number];
    if (status === -1) throw limitReached("webhooks", count, max);
    return record;
  }

  async get(userId: string, id: string): Promise<WebhookRecord | undefined> {
    return parseStored<WebhookRecord>(await this.ctx.redis.get(this.ctx.keys.webhook(userId, id)));
  }

  async list(userId: string, page: PageRequest): Promise<Page<WebhookRecord>> {
    const { redis, keys } = this.ctx;
    return pageFromSortedSet(redis, keys.webhooks(userId), page, (ids) =>
      loadJson<WebhookRecord>(
        redis,
        ids.map((id) => keys.webhook(userId, id)),
      ),
    );
  }

  /** Applies a patch; undefined when the webhook does not exist. */
  update(userId: string, id: string, patch: WebhookPatch): Promise<WebhookRecord | undefined> {
    return this.modify(userId, id, (current) => ({ ...current, ...definedOnly(patch), updated_at: epochSeconds(this.ctx.now()) }));
  }

  /**
   * Sets `active`; `changed` tells whether this call made the change (false when the webhook was
   * already so), so that of several deliveries answered 410 at once only one reports it.
   * Undefined when the webhook does not exist.
   */
  async setActive(userId: string, id: string, active: boolean): Promise<{ webhook: WebhookRecord; changed: boolean } | undefined> {
    let changed = false;
    // `modify` may call `change` again after a lost race: the last call is the one that counted.
    const webhook = await this.modify(userId, id, (current) => {
      changed = current.active !== active;
      return changed ? { ...current, active, updated_at: epochSeconds(this.ctx.now()) } : current;
    });
    return webhook && { webhook, changed };
  }

  /**
   * Makes `secret` the signing secret; the replaced one stays in effect for `overlapMs`
   * (domain/signing.ts `rotateSecrets`). Undefined when the webhook does not exist.
   */
  rotateSecret(userId: string, id: string, secret: string, overlapMs: number): Promise<WebhookRecord | undefined> {
    return this.modify(userId, id, (current) => {
      const nowMs = this.ctx.now();
      const secrets = rotateSecrets(current, secret, nowMs, overlapMs);
      if (secrets.signing_secret === current.signing_secret) return current;
      return { ...current, ...secrets, updated_at: epochSeconds(nowMs) };
    });
  }

  /**
   * Read, change, write back, as one atomic step (REPLACE_AND_PUBLISH_LUA): a write that lost a
   * race with another (a PUT and a secret rotation, two rotations, a 410 deactivation) reads
   * again instead of undoing the other's change, so a rotated secret cannot be put back by a
   * concurrent update. The change message is published in the same step; listener caches drop
   * the record. `change` returning `current` itself writes nothing. Undefined when the webhook
   * does not exist or was deleted meanwhile (a deleted webhook is not resurrected).
   */
  private async modify(userId: string, id: string, change: (current: WebhookRecord) => WebhookRecord): Promise<WebhookRecord | undefined> {
    const { redis, keys } = this.ctx;
    const key = keys.webhook(userId, id);
    const message = listenerChangeMessage(userId, id);
    for (let round = 0; round < MAX_MODIFY_ROUNDS; round++) {
      const raw = await redis.get(key);
      const current = parseStored<WebhookRecord>(raw);
      if (raw === null || !current) return undefined;
      const next = change(current);
      if (next === current) return current;
      const status = Number(await this.replaceAndPublish([key], [raw, JSON.stringify(next), keys.listenerChanges(), message]));
      if (status === -1) return undefined;
      if (status === 1) {
        this.changes.emit(message);
        return next;
      }
    }
    throw new ConflictError(`webhook ${id} kept changing while being updated; try again`);
  }

  /**
   * Deletes the webhook and its attempt log. Subscriptions are removed by the caller. The records
   * that held their event's stored payload release it afterwards (a crash in between leaves the
   * payload until its user or event is deleted; the webhook's waiting jobs release theirs as they
   * find it gone).
   */
  async delete(userId: string, id: string): Promise<boolean> {
    const { redis, keys } = this.ctx;
    const deliveryIds = await redis.zrange(keys.deliveries(userId, id), 0, -1);
    const holds = await this.payloadHolds(userId, deliveryIds);
    const message = listenerChangeMessage(userId, id);
    const tx = redis.multi().del(keys.webhook(userId, id)).zrem(keys.webhooks(userId), id).del(keys.deliveries(userId, id));
    for (const d of deliveryIds) tx.del(keys.delivery(userId, d));
    const res = await tx.publish(keys.listenerChanges(), message).exec();
    this.changes.emit(message);
    await Promise.all([...holds].map(([key, ids]) => this.payloads.releaseKey(key, ids)));
    return Number(res?.[0]?.[1] ?? 0) > 0;
  }

  /** The stored payloads the records of `deliveryIds` hold: payload key -> delivery ids. */
  private async payloadHolds(userId: string, deliveryIds: readonly string[]): Promise<Map<string, string[]>> {
    const { redis, keys } = this.ctx;
    const holds = new Map<string, string[]>();
    for (let i = 0; i < deliveryIds.length; i += HOLD_READS) {
      const ids = deliveryIds.slice(i, i + HOLD_READS);
      const raws = await redis.mget(...ids.map((d) => keys.delivery(userId, d)));
      raws.forEach((raw, j) => {
        if (!raw?.includes('"payload_key"')) return;
        const key = parseStored<{ payload_key?: string }>(raw)?.payload_key;
        if (key === undefined) return;
        const held = holds.get(key);
        if (held) held.push(ids[j] as string);
        else holds.set(key, [ids[j] as string]);
      });
    }
    return holds;
  }
}

function definedOnly<T extends object>(patch: T): Partial<T> {
  return Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<T>;
}
