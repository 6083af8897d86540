import type { Redis } from "ioredis";
import type { Logger } from "../observability/logger.js";
import { InvalidatedCache } from "./invalidated-cache.js";

/**
 * The pub/sub side of an in-process cache (`auth-cache.ts`, `listener-cache.ts`): subscribes a
 * connection of its own to one channel, hands every message to the cache, and says whether the
 * cache may be used. It may only while the subscription is live: when the connection drops, the
 * feed reports "down" (the cache empties) and lookups go to Redis until it is subscribed again,
 * so no invalidation can be missed unnoticed.
 *
 * The subscriber is a single-node connection, also on a Redis Cluster (app/connections.ts: one node
 * at a time, the next one after a loss): an ioredis Cluster subscriber moves to another node without
 * a `close` or `ready`, so a message lost in the move would go unnoticed (design 4.7). Every
 * (re)subscription also empties the cache, whatever the connection reported before it.
 */
export class InvalidationFeed {
  private live = false;
  private stopping = false;

  constructor(
    private readonly opts: {
      /** A connection of its own (one node): it goes into subscriber mode. */
      readonly subscriber: Redis;
      readonly channel: string;
      readonly logger: Logger;
      /** Names the cache in log lines. */
      readonly what: string;
      readonly onMessage: (message: string) => void;
      readonly onDown: () => void;
    },
  ) {}

  /** Subscribes; resolves once the feed is live. Resubscribes after every reconnect. */
  async start(): Promise<void> {
    const { subscriber, channel, logger, what } = this.opts;
    subscriber.on("message", (ch: string, message: string) => {
      if (ch === channel) this.opts.onMessage(message);
    });
    const down = () => {
      if (this.live && !this.stopping) logger.warn(`${what}: invalidation channel lost; reading from Redis until it is back`);
      this.live = false;
      this.opts.onDown();
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
      // Whatever was cached before this subscription may have missed a message: start empty.
      this.opts.onDown();
      this.live = !this.stopping && this.opts.subscriber.status === "ready";
    } catch (err) {
      this.opts.logger.warn({ err }, `${this.opts.what}: subscribe failed; reading from Redis`);
    }
  }

  isLive(): boolean {
    return this.live;
  }

  /** Stops using the cache and closes the subscriber connection. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.live = false;
    this.opts.onDown();
    await this.opts.subscriber.quit().catch(() => {});
  }
}

export interface FeedCacheOptions {
  /** A connection of its own (one node): it goes into subscriber mode. */
  readonly subscriber: Redis;
  /** The channel the store publishes invalidations on. */
  readonly channel: string;
  readonly logger: Logger;
  readonly maxEntries?: number;
  readonly maxAgeMs?: number;
  readonly now?: () => number;
}

/**
 * An `InvalidatedCache` kept honest by an `InvalidationFeed`: entries are used only while the feed
 * is live (emptied when it drops), at most `maxEntries` (10 000) of them, each re-read after
 * `maxAgeMs` (60 s) as a safety net. Subclasses say what a message drops and which in-process
 * changes drop entries at once.
 */
export abstract class FeedCache<V> {
  protected readonly cache: InvalidatedCache<V>;
  private readonly feed: InvalidationFeed;

  constructor(opts: FeedCacheOptions, what: string) {
    this.cache = new InvalidatedCache({
      maxEntries: opts.maxEntries ?? 10_000,
      maxAgeMs: opts.maxAgeMs ?? 60_000,
      now: opts.now ?? Date.now,
    });
    this.feed = new InvalidationFeed({
      subscriber: opts.subscriber,
      channel: opts.channel,
      logger: opts.logger,
      what,
      onMessage: (message) => this.drop(message),
      onDown: () => this.cache.clear(),
    });
  }

  /** Drops what an invalidation message names. */
  protected abstract drop(message: string): void;

  /** Registers for this process's own changes (they drop entries before their caller resumes). */
  protected abstract listenLocally(): void;

  /** Subscribes; resolves once the cache is in use (lookups go to Redis until then, so a caller need not wait). */
  async start(): Promise<void> {
    this.listenLocally();
    await this.feed.start();
  }

  /** The value for `key` held in memory while the feed is live, without a promise; undefined: ask `lookup`. */
  protected peek(key: string): V | undefined {
    return this.cache.peek(key, this.feed.isLive());
  }

  /** The value for `key`, from memory while the feed is live, else loaded. */
  protected lookup(key: string, load: () => Promise<V | undefined>): Promise<V | undefined> {
    return this.cache.get(key, load, this.feed.isLive());
  }

  isLive(): boolean {
    return this.feed.isLive();
  }

  /** Stops using the cache and closes the subscriber connection. */
  async stop(): Promise<void> {
    await this.feed.stop();
  }
}
