import { ValidationError } from "./errors.js";

/** Page parameters after validation. `after`/`before` are raw cursors; their meaning is per list. */
export interface PageRequest {
  readonly limit: number;
  readonly after?: string;
  readonly before?: string;
}

export interface PageInfo {
  total_count: number;
  count: number;
  start_cursor: string | null;
  end_cursor: string | null;
}

/** `limit` must be an integer in 1..100 (SPEC §2); default 10. */
export function parseLimit(raw: unknown, fallback = 10): number {
  if (raw === undefined || raw === null || raw === "") return fallback;
  const text = typeof raw === "number" ? String(raw) : raw;
  if (typeof text !== "string" || !/^\d{1,3}$/.test(text.trim())) {
    throw new ValidationError("limit must be an integer from 1 to 100");
  }
  const n = Number(text);
  if (n < 1 || n > 100) throw new ValidationError("limit must be an integer from 1 to 100");
  return n;
}

function cursorParam(raw: unknown, name: string): string | undefined {
  if (raw === undefined || raw === null || raw === "") return undefined;
  if (typeof raw !== "string") throw new ValidationError(`${name} must be a cursor string`);
  return raw;
}

export function parsePageRequest(params: Readonly<Record<string, unknown>>): PageRequest {
  const after = cursorParam(params.after, "after");
  const before = cursorParam(params.before, "before");
  if (after !== undefined && before !== undefined) throw new ValidationError("pass either after or before, not both");
  return { limit: parseLimit(params.limit), after, before };
}

/**
 * The slice of a newest-first list that a page covers, by rank. `after` rank r returns ranks
 * r+1..r+limit; `before` rank r returns the `limit` items closest before it.
 */
export function pageRange(
  req: { limit: number },
  anchor?: { rank: number; direction: "after" | "before" },
): { start: number; stop: number } {
  if (!anchor) return { start: 0, stop: req.limit - 1 };
  if (anchor.direction === "after") return { start: anchor.rank + 1, stop: anchor.rank + req.limit };
  return { start: Math.max(0, anchor.rank - req.limit), stop: anchor.rank - 1 };
}

export function pageInfo<T>(items: readonly T[], total: number, cursorOf: (item: T) => string): PageInfo {
  const first = items[0];
  const last = items[items.length - 1];
  return {
    total_count: total,
    count: items.length,
    start_cursor: first === undefined ? null : cursorOf(first),
    end_cursor: last === undefined ? null : cursorOf(last),
  };
}
