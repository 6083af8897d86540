import { FeedCache, type FeedCacheOptions } from "./invalidation-feed.js";
import type { UserStore } from "./users.js";

export type AuthCacheOptions = FeedCacheOptions;

/**
 * API key -> user id without a Redis round trip per request. Every change that retires a key
 * (rotation, user deletion) publishes the key's digest in the same atomic step as the change (on
 * the global tag, with the key index: store/users.ts), and every process drops it on receipt, so a
 * revoked key stops working as soon as the message is read: in practice before the rotating client
 * gets its answer back (the process that made the change drops it before the change's caller
 * resumes). The cache is used only while the subscription is live; when the subscriber connection
 * drops, the cache empties and lookups go to Redis until it is subscribed again. New keys need nothing: misses are never cached.
 *
 * Entries are keyed by the key itself, so a hit costs no SHA-256 (about 2 % of an emit's CPU);
 * invalidations name digests and scan the entries (at most `maxEntries`; rotations are rare). The
 * keys held this way live only in this process's memory, for at most `maxAgeMs`, like the request
 * that carried them; Redis still holds digests only.
 */
export class AuthCache extends FeedCache<{ readonly userId: string; readonly digest: string }> {
  constructor(
    private readonly users: UserStore,
    opts: AuthCacheOptions,
  ) {
    super(opts, "auth cache");
  }

  private readonly revokedListeners = new Set<(digest: string) => void>();

  /** Calls `fn` with the digest of every key this process learns stopped working (its own changes and other processes'). */
  onRevoked(fn: (digest: string) => void): void {
    this.revokedListeners.add(fn);
  }

  /** A revocation names the key's digest. */
  protected drop(digest: string): void {
    this.cache.invalidateWhere((entry) => entry.digest === digest);
    for (const fn of this.revokedListeners) fn(digest);
  }

  protected listenLocally(): void {
    this.users.revocations.listen((digest) => this.drop(digest));
  }

  /** The user of a key this process holds (no Redis, no promise); undefined: ask `authenticate`. */
  cached(apiKey: string): string | undefined {
    return this.peek(apiKey)?.userId;
  }

  /** Same contract as `UserStore.authenticate`. */
  async authenticate(apiKey: string): Promise<string | undefined> {
    const entry = await this.lookup(apiKey, async () => {
      const digest = this.users.digestOf(apiKey);
      const userId = digest === undefined ? undefined : await this.users.userOfDigest(digest);
      return userId === undefined || digest === undefined ? undefined : { userId, digest };
    });
    return entry?.userId;
  }
}
