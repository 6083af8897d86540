import type { PageRequest } from "../domain/pagination.js";
import { newId } from "../domain/ids.js";
import { limitReached, UNLIMITED, type UserLimits } from "../domain/limits.js";
import { CAPPED_INSERT_LUA } from "./capped-insert-lua.js";
import { epochSeconds, parseStored, type StoreContext } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { loadJson, pageFromSortedSet, type Page } from "./listing.js";
import { LocalChanges } from "./local-changes.js";
import { listenerChangeMessage } from "./keys.js";

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
}

export interface WebhookPatch {
  url?: string;
  name?: string | null;
  description?: string | null;
  active?: boolean;
}

export class WebhookStore {
  /**
   * The change message of every update or deletion made through this store, in this process;
   * other processes read it on `listenerChanges`.
   */
  readonly changes = new LocalChanges();

  private readonly cappedInsert: ScriptCall;

  constructor(
    private readonly ctx: StoreContext,
    /** Uses webhooks. */
    private readonly limits: UserLimits = UNLIMITED,
  ) {
    this.cappedInsert = defineScript(ctx.redis, "tribCappedInsert", 2, CAPPED_INSERT_LUA);
  }

  /**
   * Creates a webhook. At most `limits.webhooks` per user: past it, 429 `limit_exceeded`,
   * checked in the same atomic step as the write (store/capped-insert-lua.ts).
   */
  async create(
    userId: string,
    input: { url: string; name: string | null; description: string | null; signingSecret: string },
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
  async update(userId: string, id: string, patch: WebhookPatch): Promise<WebhookRecord | undefined> {
    const current = await this.get(userId, id);
    if (!current) return undefined;
    const next: WebhookRecord = { ...current, ...definedOnly(patch), updated_at: epochSeconds(this.ctx.now()) };
    // SET XX: a webhook deleted meanwhile is not resurrected. Listener caches learn of the change
    // from the message published in the same transaction.
    const { redis, keys } = this.ctx;
    const message = listenerChangeMessage(userId, id);
    const res = await redis
      .multi()
      .set(keys.webhook(userId, id), JSON.stringify(next), "XX")
      .publish(keys.listenerChanges(), message)
      .exec();
    this.changes.emit(message);
    return res?.[0]?.[1] === "OK" ? next : undefined;
  }

  /** Deletes the webhook and its attempt log. Subscriptions are removed by the caller. */
  async delete(userId: string, id: string): Promise<boolean> {
    const { redis, keys } = this.ctx;
    const deliveryIds = await redis.zrange(keys.deliveries(userId, id), 0, -1);
    const message = listenerChangeMessage(userId, id);
    const tx = redis.multi().del(keys.webhook(userId, id)).zrem(keys.webhooks(userId), id).del(keys.deliveries(userId, id));
    for (const d of deliveryIds) tx.del(keys.delivery(userId, d));
    const res = await tx.publish(keys.listenerChanges(), message).exec();
    this.changes.emit(message);
    return Number(res?.[0]?.[1] ?? 0) > 0;
  }
}

function definedOnly<T extends object>(patch: T): Partial<T> {
  return Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<T>;
}
