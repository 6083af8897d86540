/**
 * At most `perKey` holders at once per key (a user), in this process; more wait in FIFO order,
 * each up to its own deadline. A waiter whose deadline passes gets `false` and holds nothing.
 */
export class KeyedSlots {
  private readonly held = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();

  constructor(private readonly perKey: number) {}

  /** Holders of `key` right now (tests, operators' tools). */
  count(key: string): number {
    return this.held.get(key) ?? 0;
  }

  /** Takes a slot of `key`, waiting up to `waitMs`; true when taken (then `release` it once). */
  async take(key: string, waitMs: number): Promise<boolean> {
    if (this.count(key) < this.perKey && !this.waiting.has(key)) {
      this.held.set(key, this.count(key) + 1);
      return true;
    }
    return new Promise<boolean>((resolve) => {
      const queue = this.waiting.get(key) ?? [];
      this.waiting.set(key, queue);
      const grant = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        const q = this.waiting.get(key);
        const i = q?.indexOf(grant) ?? -1;
        if (q && i >= 0) q.splice(i, 1);
        if (q?.length === 0) this.waiting.delete(key);
        resolve(false);
      }, waitMs);
      queue.push(grant);
    });
  }

  /** Gives a slot back: the next waiter of `key` takes it. */
  release(key: string): void {
    const q = this.waiting.get(key);
    const next = q?.shift();
    if (q?.length === 0) this.waiting.delete(key);
    if (next) {
      next(); // the slot passes on: the count stays
      return;
    }
    const n = this.count(key) - 1;
    if (n <= 0) this.held.delete(key);
    else this.held.set(key, n);
  }
}
