import { FeedCache, type FeedCacheOptions } from "./invalidation-feed.js";
import type { WebhookRecord, WebhookStore } from "./webhooks.js";

export type WebhookCacheOptions = FeedCacheOptions;

/**
 * Webhook records for the delivery worker without a Redis read per attempt. Every update or
 * deletion of a webhook publishes it in the same transaction as the write (a user's deletion
 * publishes all of the user's webhooks once they are gone), and every process drops what the
 * message names; the process that made the change drops it before the change's caller resumes.
 * Used only while the subscription is live (see `InvalidationFeed`); misses (a deleted webhook)
 * are never kept, and entries older than `maxAgeMs` are read again.
 */
export class WebhookCache extends FeedCache<WebhookRecord> {
  constructor(
    private readonly store: WebhookStore,
    opts: WebhookCacheOptions,
  ) {
    super(opts, "webhook cache");
  }

  /** "<user id> <webhook id>" drops one webhook, "<user id> *" all of the user's. */
  protected drop(message: string): void {
    const space = message.indexOf(" ");
    const userId = message.slice(0, space);
    const id = message.slice(space + 1);
    if (space <= 0) this.cache.clear();
    else if (id === "*") this.cache.invalidateWhere((w) => w.user_id === userId);
    else this.cache.invalidate(cacheKey(userId, id));
  }

  protected listenLocally(): void {
    this.store.onChange((message) => this.drop(message));
  }

  /** Same contract as `WebhookStore.get`. */
  get(userId: string, id: string): Promise<WebhookRecord | undefined> {
    return this.lookup(cacheKey(userId, id), () => this.store.get(userId, id));
  }
}

const cacheKey = (userId: string, id: string) => `${userId} ${id}`;
