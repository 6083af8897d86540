/**
 * Compiled component code kept in the daemon by code (issue 12 item 2): a component and its
 * compiled bundle never change once saved (a redeploy with other code is another component, with
 * another id and code hash), so a source's runs need not read the bundle from Redis each time.
 *
 * Entries are keyed by `codeKey(component)` (component id and code hash): a component id belongs
 * to one user (or to the shipped registry), so a hit can only hand a run the bundle its own
 * component lookup authorised. Bounded by bytes (UTF-8 length of the bundles), least recently used
 * first out; a bundle larger than the whole budget is used and not kept. Concurrent misses of one
 * key share one read.
 */

export interface CodeOwner {
  id: string;
  code_hash: string;
}

/** The name of a component's compiled code: also what the sandbox keys its contexts and scripts by. */
export function codeKey(component: CodeOwner): string {
  return `${component.id}:${component.code_hash}`;
}

/** Default budget: a few hundred typical bundles (tens of KB each), a handful of large ones. */
export const DEFAULT_COMPILED_CACHE_BYTES = 64 * 1024 * 1024;

export class CompiledCodeCache {
  /** By key, least recently used first. */
  private readonly entries = new Map<string, { code: string; bytes: number }>();
  private readonly loading = new Map<string, Promise<string>>();
  private total = 0;
  /** Reads that went to the loader (tests, metrics). */
  misses = 0;

  constructor(private readonly maxBytes = DEFAULT_COMPILED_CACHE_BYTES) {}

  /** Bytes held. */
  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The code under `key`, from memory, else from `load` (kept for next time). */
  get(key: string, load: () => Promise<string>): Promise<string> {
    const hit = this.peek(key);
    if (hit !== undefined) return Promise.resolve(hit);
    let pending = this.loading.get(key);
    if (!pending) {
      this.misses++;
      pending = load().then(
        (code) => {
          this.loading.delete(key);
          this.keep(key, code);
          return code;
        },
        (err: unknown) => {
          this.loading.delete(key);
          throw err;
        },
      );
      this.loading.set(key, pending);
    }
    return pending;
  }

  /** The code under `key` if held (counted as a use), else undefined. */
  peek(key: string): string | undefined {
    const hit = this.entries.get(key);
    if (!hit) return undefined;
    this.entries.delete(key);
    this.entries.set(key, hit);
    return hit.code;
  }

  /** Keeps `code` under `key`, making room by dropping the least recently used. */
  keep(key: string, code: string): void {
    const bytes = Buffer.byteLength(code);
    if (bytes > this.maxBytes) return;
    const old = this.entries.get(key);
    if (old) {
      this.entries.delete(key);
      this.total -= old.bytes;
    }
    for (const [k, e] of this.entries) {
      if (this.total + bytes <= this.maxBytes) break;
      this.entries.delete(k);
      this.total -= e.bytes;
    }
    this.entries.set(key, { code, bytes });
    this.total += bytes;
  }
}
