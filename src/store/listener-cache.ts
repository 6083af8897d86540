import { FeedCache, type FeedCacheOptions } from "./invalidation-feed.js";
import type { WebhookRecord, WebhookStore } from "./webhooks.js";
import type { WorkflowRecord, WorkflowStore } from "./workflows.js";

export type ListenerCacheOptions = FeedCacheOptions;

/**
 * Webhook and workflow records for delivery attempts without a Redis read per attempt. Every
 * update or deletion of either publishes it in the same transaction as the write (a user's
 * deletion publishes all of the user's once they are gone), and every process drops what the
 * message names; the process that made the change drops it before the change's caller resumes.
 * Used only while the subscription is live (see `InvalidationFeed`); misses (a deleted listener)
 * are never kept, and entries older than `maxAgeMs` are read again. Entries are keyed
 * "<user id> <listener id>": webhook (`wh_`) and workflow (`p_`) ids never collide.
 */
export class ListenerCache extends FeedCache<WebhookRecord | WorkflowRecord> {
  constructor(
    private readonly webhooks: WebhookStore,
    private readonly workflows: WorkflowStore,
    opts: ListenerCacheOptions,
  ) {
    super(opts, "listener cache");
  }

  /** "<user id> <id>" drops one listener, "<user id> *" all of the user's. */
  protected drop(message: string): void {
    const space = message.indexOf(" ");
    const userId = message.slice(0, space);
    const id = message.slice(space + 1);
    if (space <= 0) this.cache.clear();
    // Workflow records do not name their user: a user's deletion (rare) drops every workflow.
    else if (id === "*") this.cache.invalidateWhere((r) => !("user_id" in r) || r.user_id === userId);
    else this.cache.invalidate(cacheKey(userId, id));
  }

  protected listenLocally(): void {
    this.webhooks.changes.listen((message) => this.drop(message));
    this.workflows.changes.listen((message) => this.drop(message));
  }

  /** Same contract as `WebhookStore.get`. */
  get(userId: string, id: string): Promise<WebhookRecord | undefined> {
    return this.lookup(cacheKey(userId, id), () => this.webhooks.get(userId, id)) as Promise<WebhookRecord | undefined>;
  }

  /** Same contract as `WorkflowStore.get`. */
  workflow(userId: string, id: string): Promise<WorkflowRecord | undefined> {
    return this.lookup(cacheKey(userId, id), () => this.workflows.get(userId, id)) as Promise<WorkflowRecord | undefined>;
  }
}

const cacheKey = (userId: string, id: string) => `${userId} ${id}`;
