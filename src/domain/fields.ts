/**
 * include/exclude (SPEC §2): comma lists applied to the top-level keys of each object in `data`,
 * include first, then exclude; unknown names are ignored. Pure.
 */
export interface FieldFilter {
  readonly include?: ReadonlySet<string>;
  readonly exclude?: ReadonlySet<string>;
}

function parseList(raw: unknown): ReadonlySet<string> | undefined {
  if (typeof raw !== "string") return undefined;
  const names = raw
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  return names.length > 0 ? new Set(names) : undefined;
}

export function parseFieldFilter(include: unknown, exclude: unknown): FieldFilter {
  return { include: parseList(include), exclude: parseList(exclude) };
}

export function applyFieldFilter<T>(item: T, filter: FieldFilter): T {
  if (!filter.include && !filter.exclude) return item;
  if (item === null || typeof item !== "object" || Array.isArray(item)) return item;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(item)) {
    if (filter.include && !filter.include.has(k)) continue;
    if (filter.exclude?.has(k)) continue;
    out[k] = v;
  }
  return out as T;
}
