/** UTC day used for daily quotas, e.g. "2026-11-22". */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

/** The paid billing period: the current UTC calendar month, in seconds. */
export function billingPeriod(ms: number): { start: number; end: number } {
  const d = new Date(ms);
  const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const end = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return { start: Math.floor(start / 1000), end: Math.floor(end / 1000) };
}
