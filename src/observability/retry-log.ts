import type { Logger } from "./logger.js";

/** While a loop keeps failing, one reminder line this often (the count since the last line). */
export const RETRY_LOG_EVERY_MS = 30_000;

/**
 * The log of a loop that retries on failure (fan-out, run consumer, scheduler, replay driver; the
 * live tail keeps its own throttle). A Redis outage makes every such loop fail at its own cadence
 * (some several times a second), which buried the one line that mattered. This writes the first
 * failure of a streak at the loop's level, then at most one "still failing" line every `everyMs`
 * with the number of failures since the last line (a different error inside a streak shows only in
 * those lines), and one info line when the loop works again (how long it failed).
 */
export class RetryLog {
  private failures = 0;
  private unlogged = 0;
  private since = 0;
  private lastLine = 0;

  constructor(
    private readonly logger: Logger,
    /** The line of a failure, e.g. "fan-out loop error; retrying". */
    private readonly message: string,
    private readonly opts: { level?: "warn" | "error"; everyMs?: number; now?: () => number } = {},
  ) {}

  /** A round failed with `err`. */
  failed(err: unknown): void {
    const now = (this.opts.now ?? Date.now)();
    const level = this.opts.level ?? "warn";
    this.failures++;
    if (this.failures === 1) {
      this.since = now;
      this.lastLine = now;
      this.logger[level]({ err }, this.message);
      return;
    }
    this.unlogged++;
    if (now - this.lastLine < (this.opts.everyMs ?? RETRY_LOG_EVERY_MS)) return;
    this.logger[level]({ err, failures: this.unlogged, failingForMs: now - this.since }, `${this.message} (still failing)`);
    this.unlogged = 0;
    this.lastLine = now;
  }

  /** A round worked: ends a streak of failures (one info line when there was one). */
  succeeded(): void {
    if (this.failures === 0) return;
    const now = (this.opts.now ?? Date.now)();
    this.logger.info({ failures: this.failures, failedForMs: now - this.since }, `${this.message}: recovered`);
    this.failures = 0;
    this.unlogged = 0;
  }

  /** Failures in the current streak (0: the last round worked). */
  streak(): number {
    return this.failures;
  }
}
