import type { ResourceUsageCounts, UserLimits } from "../domain/limits.js";
import type { ComponentStore } from "./components.js";
import type { StoreContext } from "./context.js";

/**
 * What a user keeps, counted from the same sets the limits are checked against (their list
 * sorted sets, the auto-subscriptions hash, the component sizes and the stored-streams hash), so `GET /users/me` shows
 * exactly what the next create will be measured by.
 */
export class ResourceUsage {
  constructor(
    private readonly ctx: StoreContext,
    private readonly components: ComponentStore,
    /** The limits this usage is measured against (shown beside it). */
    readonly limits: UserLimits,
  ) {}

  /** One round trip on the auto-pipelined connection (two when old components need their sizes measured). */
  async of(userId: string): Promise<ResourceUsageCounts> {
    const { redis, keys } = this.ctx;
    const [workflows, sources, webhooks, subscriptions, autoSubscriptions, components, streamFields, storedBytes] = await Promise.all([
      redis.zcard(keys.workflows(userId)),
      redis.zcard(keys.sources(userId)),
      redis.zcard(keys.webhooks(userId)),
      redis.zcard(keys.subscriptionOrder(userId)),
      redis.hlen(keys.autoSubscriptions(userId)),
      this.components.usage(userId),
      // The record script's own count (store/scripts/record-events.ts): a field per stream and `bytes`.
      redis.hlen(keys.storedStreams(userId)),
      redis.hget(keys.storedStreams(userId), "bytes"),
    ]);
    return {
      workflows,
      sources,
      components: components.count,
      webhooks,
      subscriptions,
      auto_subscriptions: autoSubscriptions,
      component_bytes: components.bytes,
      streams: storedBytes === null ? streamFields : streamFields - 1,
      stored_bytes: Number(storedBytes ?? 0),
    };
  }
}
