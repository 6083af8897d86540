import type { RedisClient } from "./context.js";
import { decodeCursor, encodeCursor } from "../domain/cursors.js";
import { ValidationError } from "../domain/errors.js";
import { pageInfo, pageRange, type PageInfo, type PageRequest } from "../domain/pagination.js";

export interface Page<T> {
  data: T[];
  page_info: PageInfo;
}

/**
 * One page of a per-user sorted set (score = creation time, member = id), newest first.
 * Cursors are base64url ids; the cursor's rank anchors the page.
 */
export async function pageFromSortedSet<T>(
  redis: RedisClient,
  key: string,
  req: PageRequest,
  load: (ids: string[]) => Promise<(T | undefined)[]>,
): Promise<Page<T>> {
  let anchor: { rank: number; direction: "after" | "before" } | undefined;
  const raw = req.after ?? req.before;
  if (raw !== undefined) {
    const name = req.after !== undefined ? "after" : "before";
    const id = decodeCursor(raw);
    const rank = id === undefined ? null : await redis.zrevrank(key, id);
    if (rank === null) throw new ValidationError(`${name} is not a cursor of this list`, "invalid_cursor");
    anchor = { rank, direction: name };
  }
  const { start, stop } = pageRange(req, anchor);
  const [ids, total] = await Promise.all([stop < start ? Promise.resolve([]) : redis.zrevrange(key, start, stop), redis.zcard(key)]);
  const data = (await load(ids)).filter((x): x is T => x !== undefined);
  return { data, page_info: pageInfo(ids, total, encodeCursor) };
}

/** Loads JSON values stored at the given keys in one round trip; missing or corrupt values are undefined. */
export async function loadJson<T>(redis: RedisClient, keys: string[]): Promise<(T | undefined)[]> {
  if (keys.length === 0) return [];
  const raws = await redis.mget(...keys);
  return raws.map((r) => {
    if (r === null) return undefined;
    try {
      return JSON.parse(r) as T;
    } catch {
      return undefined;
    }
  });
}
