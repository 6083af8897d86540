/**
 * The one polling helper of the tests: tests wait for outcomes with a deadline, never for a fixed
 * time (a loaded machine only makes them slower, not wrong).
 */

export interface WaitOptions {
  /** Give up after this long (default 10 s). */
  timeoutMs?: number;
  /** Poll interval (default 25 ms). */
  intervalMs?: number;
  /** What is awaited, for the failure message. */
  what?: string;
}

/**
 * Polls `probe` until it returns something other than undefined, null or false, and returns that
 * value; throws after the deadline with `what` and the last value or error in the message.
 */
export async function waitFor<T>(probe: () => T | Promise<T>, opts: WaitOptions = {}): Promise<Exclude<T, undefined | null | false>> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const intervalMs = opts.intervalMs ?? 25;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== null && v !== false) return v as Exclude<T, undefined | null | false>;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${opts.what ?? "a condition"} (last: ${detail})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
