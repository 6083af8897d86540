import { randomBytes } from "node:crypto";
import { createKeys } from "../../src/store/keys.js";
import { WebhookStore } from "../../src/store/webhooks.js";
import type { TestDaemon } from "./daemon.js";
import { connectRedis } from "./redis.js";

/**
 * Points a stored webhook at `url` without the API's checks: a webhook stored before
 * ALLOW_PRIVATE_DESTINATIONS was turned off, or whose name resolves to a private address only
 * after it was stored. What the connect-time guard is for, once the API refuses such URLs itself.
 */
export async function storeWebhookUrl(td: TestDaemon, userId: string, webhookId: string, url: string): Promise<void> {
  const redis = connectRedis();
  try {
    const store = new WebhookStore({ redis, keys: createKeys(td.prefix), now: Date.now, randomBytes: (n) => randomBytes(n) });
    if (!(await store.update(userId, webhookId, { url }))) throw new Error(`webhook ${webhookId} not found`);
  } finally {
    redis.disconnect();
  }
}
