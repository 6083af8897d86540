import type { Redis } from "ioredis";
import type { Logger } from "../observability/logger.js";
import { InvalidatedCache } from "./invalidated-cache.js";
import type { UserStore } from "./users.js";

export interface AuthCacheOptions {
  /** A connection of its own: it goes into subscriber mode. */
  readonly subscriber: Redis;
  /** The channel `UserStore` publishes revoked key digests on (`keys.apiKeyRevocations()`). */
  readonly channel: string;
  readonly logger: Logger;
  readonly maxEntries?: number;
  readonly maxAgeMs?: number;
  readonly now?: () => number;
}

/**
 * API key -> user id without a Redis round trip per request. Every change that retires a key
 * (rotation, user deletion) publishes the key's digest in the same MULTI as the change, and every
 * process drops it on receipt, so a revoked key stops working as soon as the message is read: in
 * practice before the rotating client gets its answer back (the process that made the change
 * drops it before the change's caller resumes). The cache is used only while the
 * subscription is live; when the subscriber connection drops, the cache empties and lookups go to
 * Redis until it is subscribed again. New keys need nothing: misses are never cached.
 *
 * Entries are keyed by the key itself, so a hit costs no SHA-256 (about 2 % of an emit's CPU);
 * invalidations name digests and scan the entries (at most `maxEntries`; rotations are rare). The
 * keys held this way live only in this process's memory, for at most `maxAgeMs`, like the request
 * that carried them; Redis still holds digests only.
 */
export class AuthCache {
  private readonly cache: InvalidatedCache<{ readonly userId: string; readonly digest: string }>;
  private live = false;
  private stopping = false;

  constructor(
    private readonly users: UserStore,
    private readonly opts: AuthCacheOptions,
  ) {
    this.cache = new InvalidatedCache({
      maxEntries: opts.maxEntries ?? 10_000,
      maxAgeMs: opts.maxAgeMs ?? 60_000,
      now: opts.now ?? Date.now,
    });
  }

  /**
   * Subscribes; resolves once the cache is in use (lookups go to Redis until then, so a caller
   * need not wait). Resubscribes after every reconnect.
   */
  async start(): Promise<void> {
    const { subscriber, channel, logger } = this.opts;
    // This process's own rotations and deletions invalidate at once, before their caller resumes.
    const revoke = (digest: string) => this.cache.invalidateWhere((entry) => entry.digest === digest);
    this.users.onKeyRevoked(revoke);
    subscriber.on("message", (ch: string, digest: string) => {
      if (ch === channel) revoke(digest);
    });
    const down = () => {
      if (this.live && !this.stopping) logger.warn("auth cache: invalidation channel lost; reading keys from Redis until it is back");
      this.live = false;
      this.cache.clear();
    };
    subscriber.on("close", down);
    subscriber.on("reconnecting", down);
    await this.subscribe();
    // Registered after the first subscription, so it fires on reconnects only (one SUBSCRIBE at start).
    subscriber.on("ready", () => void this.subscribe());
  }

  private async subscribe(): Promise<void> {
    if (this.stopping) return;
    try {
      await this.opts.subscriber.subscribe(this.opts.channel);
      this.live = !this.stopping && this.opts.subscriber.status === "ready";
    } catch (err) {
      this.opts.logger.warn({ err }, "auth cache: subscribe failed; reading keys from Redis");
    }
  }

  /** Same contract as `UserStore.authenticate`. */
  async authenticate(apiKey: string): Promise<string | undefined> {
    const entry = await this.cache.get(
      apiKey,
      async () => {
        const digest = this.users.digestOf(apiKey);
        const userId = digest === undefined ? undefined : await this.users.userOfDigest(digest);
        return userId === undefined || digest === undefined ? undefined : { userId, digest };
      },
      this.live,
    );
    return entry?.userId;
  }

  isLive(): boolean {
    return this.live;
  }

  /** Stops using the cache and closes the subscriber connection. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.live = false;
    this.cache.clear();
    await this.opts.subscriber.quit().catch(() => {});
  }
}
