/**
 * The delivery retry policy: how long to wait before the next attempt. Pure: the schedule comes
 * from configuration (`DELIVERY_RETRY_SCHEDULE`) and randomness is injected, so tests can pin the
 * jitter and never sleep.
 */

/** Jitter applied to every scheduled delay: ±20 %, so retries of a burst do not arrive in lockstep. */
export const RETRY_JITTER_RATIO = 0.2;

/** Attempts a delivery gets: the first one plus one per scheduled delay. */
export function maxAttempts(scheduleMs: readonly number[]): number {
  return scheduleMs.length + 1;
}

/**
 * Delay in ms before the next attempt, given how many attempts were made so far (1-based: after
 * attempt 1 the delay is `scheduleMs[0]`), or undefined once the schedule is exhausted.
 * `random` returns a number in [0, 1), like `Math.random`.
 */
export function retryDelayMs(scheduleMs: readonly number[], attemptsMade: number, random: () => number): number | undefined {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 1) {
    throw new RangeError(`attemptsMade must be a positive integer, got ${attemptsMade}`);
  }
  const base = scheduleMs[attemptsMade - 1];
  if (base === undefined) return undefined;
  return jitter(base, random);
}

/** `base` moved uniformly within ±20 %, rounded to whole ms and never outside the band. */
function jitter(base: number, random: () => number): number {
  // Clamp the random draw: a misbehaving source must not push a delay outside the documented band.
  const r = Math.min(1, Math.max(0, random()));
  const factor = 1 + (r * 2 - 1) * RETRY_JITTER_RATIO;
  const low = Math.ceil(base * (1 - RETRY_JITTER_RATIO));
  const high = Math.floor(base * (1 + RETRY_JITTER_RATIO));
  return Math.min(high, Math.max(low, Math.round(base * factor)));
}
