/** Parses durations such as `200ms`, `5s`, `30m`, `2h` into milliseconds. Pure. */
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

export function parseDuration(text: string): number | undefined {
  const m = /^\s*(\d{1,9})\s*(ms|s|m|h)\s*$/.exec(text);
  if (!m) return undefined;
  const [, amount, unit] = m;
  return Number(amount) * UNIT_MS[unit as keyof typeof UNIT_MS];
}

/** Parses a comma list of durations; undefined when any item is malformed or the list is empty. */
export function parseDurationList(text: string): number[] | undefined {
  const items = text.split(",");
  const out: number[] = [];
  for (const item of items) {
    const ms = parseDuration(item);
    if (ms === undefined) return undefined;
    out.push(ms);
  }
  return out.length > 0 ? out : undefined;
}
