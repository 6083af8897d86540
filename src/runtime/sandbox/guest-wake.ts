/**
 * The host side of guest timers (guest-timers.ts) for one run: at most one wake-up pending, the
 * earliest the guest asked for, and at most one entry into the guest (`tick`) at a time. However
 * many timers the guest keeps and however often they fire, the host holds one Node timer and
 * enters the isolate at most once per wake-up, with no isolated-vm `timeout` of its own (see
 * GuestEntries in host-bridge.ts).
 */

export interface GuestWakeOptions {
  /** Wake-ups allowed per run; the next one ends the run through `onLimit`. */
  maxTicks: number;
  /** Enters the guest to fire its due timers; answers the delay to the next one, or -1. */
  tick: () => Promise<unknown>;
  /** The run's wake-ups are used up. */
  onLimit: () => void;
  /** Entering the guest failed (the isolate died or was disposed meanwhile). */
  onFault: (err: unknown) => void;
}

export class GuestWake {
  private timer: NodeJS.Timeout | undefined;
  /** When the pending wake-up is due (epoch ms). */
  private dueAt = Number.POSITIVE_INFINITY;
  /** While a tick runs, wake-ups asked for are kept here and armed when it ends. */
  private ticking = false;
  private dueAfterTick = Number.POSITIVE_INFINITY;
  private ticks = 0;
  private closed = false;

  constructor(private readonly opts: GuestWakeOptions) {}

  /** Asks for a wake-up `delayMs` from now; a request later than the pending one changes nothing. */
  request(delayMs: number): void {
    if (this.closed) return;
    const at = Date.now() + Math.min(Math.max(0, delayMs || 0), 2 ** 31 - 1);
    if (this.ticking) {
      this.dueAfterTick = Math.min(this.dueAfterTick, at);
      return;
    }
    if (this.timer !== undefined && this.dueAt <= at) return;
    clearTimeout(this.timer);
    this.dueAt = at;
    this.timer = setTimeout(() => void this.tick(), Math.max(0, at - Date.now()));
    this.timer.unref();
  }

  /** No wake-up after this: nothing may call into the guest once the run is over. Idempotent. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    this.dueAt = Number.POSITIVE_INFINITY;
    if (this.closed) return;
    // The guest counts its firings too; this count holds even if guest code broke the prelude's.
    if (++this.ticks > this.opts.maxTicks) {
      this.opts.onLimit();
      return;
    }
    this.ticking = true;
    let next: unknown;
    try {
      next = await this.opts.tick();
    } catch (err) {
      if (!this.closed) this.opts.onFault(err);
      return;
    } finally {
      this.ticking = false;
    }
    let at = this.dueAfterTick;
    this.dueAfterTick = Number.POSITIVE_INFINITY;
    if (typeof next === "number" && next >= 0) at = Math.min(at, Date.now() + next);
    if (at !== Number.POSITIVE_INFINITY) this.request(at - Date.now());
  }
}
