/**
 * A small in-process cache whose entries are dropped by invalidation messages (see
 * `auth-cache.ts`). Pure: no I/O here, the caller brings the loader and says whether the
 * invalidation channel is live.
 *
 * The race it closes: a lookup reads Redis, an invalidation for the same key is processed while
 * the reply is on its way, then the (now stale) reply arrives. Every invalidation bumps a
 * generation; a loaded value is only kept when no invalidation happened since its read started.
 */
export interface InvalidatedCacheOptions {
  /** Entries kept; the oldest inserted goes first past this. */
  readonly maxEntries: number;
  /** Safety net: an entry older than this is read again even without an invalidation. */
  readonly maxAgeMs: number;
  readonly now: () => number;
}

export class InvalidatedCache<V> {
  private readonly entries = new Map<string, { value: V; at: number }>();
  private generation = 0;

  constructor(private readonly opts: InvalidatedCacheOptions) {}

  /**
   * The value for `key`: from the cache when `usable` and fresh, else loaded (and kept when
   * `usable`, defined, and not invalidated meanwhile). Misses (undefined) are never kept.
   */
  async get(key: string, load: () => Promise<V | undefined>, usable: boolean): Promise<V | undefined> {
    const hit = this.peek(key, usable);
    if (hit !== undefined) return hit;
    const generation = this.generation;
    const value = await load();
    if (usable && value !== undefined && generation === this.generation) {
      this.entries.delete(key);
      if (this.entries.size >= this.opts.maxEntries) {
        const oldest = this.entries.keys().next();
        if (!oldest.done) this.entries.delete(oldest.value);
      }
      this.entries.set(key, { value, at: this.opts.now() });
    }
    return value;
  }

  /** The value for `key` when `usable` and held fresh, without a promise (the hot path's hit); undefined otherwise. */
  peek(key: string, usable: boolean): V | undefined {
    if (!usable) return undefined;
    const hit = this.entries.get(key);
    return hit && this.opts.now() - hit.at < this.opts.maxAgeMs ? hit.value : undefined;
  }

  invalidate(key: string): void {
    this.generation++;
    this.entries.delete(key);
  }

  /** Drops every entry whose value (or key) matches (a scan: meant for rare invalidations by a value's field). */
  invalidateWhere(matches: (value: V, key: string) => boolean): void {
    this.generation++;
    for (const [key, entry] of this.entries) if (matches(entry.value, key)) this.entries.delete(key);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}
