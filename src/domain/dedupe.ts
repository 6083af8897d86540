/**
 * Pipedream's dedupe strategies (SPEC §5), applied to the emits of one run. Pure: the state goes
 * in and comes out.
 * - unique: a FIFO cache of the last 100 ids; an event whose id is cached is dropped.
 * - greatest: only ids greater than the greatest seen are emitted (numbers compare as numbers).
 * - last: events after the one whose id matches the last emitted id; all of them when none matches.
 * Events without an id always pass.
 */
export type DedupeStrategy = "unique" | "greatest" | "last";

export interface DedupeState {
  unique?: string[];
  greatest?: string | number;
  last?: string;
}

export const UNIQUE_CACHE_SIZE = 100;

export interface Identified {
  meta: { id?: string | number };
}

function greater(a: string | number, b: string | number): boolean {
  const na = Number(a);
  const nb = Number(b);
  if (Number.isFinite(na) && Number.isFinite(nb)) return na > nb;
  return String(a) > String(b);
}

export function applyDedupe<T extends Identified>(
  strategy: DedupeStrategy | null,
  emits: readonly T[],
  state: DedupeState,
): { kept: T[]; state: DedupeState } {
  if (!strategy) return { kept: [...emits], state };
  switch (strategy) {
    case "unique": {
      const cache = [...(state.unique ?? [])];
      const kept: T[] = [];
      for (const e of emits) {
        if (e.meta.id === undefined) {
          kept.push(e);
          continue;
        }
        const id = String(e.meta.id);
        if (cache.includes(id)) continue;
        cache.push(id);
        if (cache.length > UNIQUE_CACHE_SIZE) cache.splice(0, cache.length - UNIQUE_CACHE_SIZE);
        kept.push(e);
      }
      return { kept, state: { ...state, unique: cache } };
    }
    case "greatest": {
      let top = state.greatest;
      const kept: T[] = [];
      for (const e of emits) {
        const id = e.meta.id;
        if (id === undefined) {
          kept.push(e);
          continue;
        }
        if (top === undefined || greater(id, top)) {
          top = id;
          kept.push(e);
        }
      }
      return { kept, state: top === undefined ? state : { ...state, greatest: top } };
    }
    case "last": {
      const index = state.last === undefined ? -1 : emits.findIndex((e) => e.meta.id !== undefined && String(e.meta.id) === state.last);
      const kept = emits.slice(index + 1);
      const lastWithId = [...kept].reverse().find((e) => e.meta.id !== undefined);
      return { kept, state: lastWithId ? { ...state, last: String(lastWithId.meta.id) } : state };
    }
    default: {
      const never: never = strategy;
      throw new Error(`unknown dedupe strategy ${String(never)}`);
    }
  }
}
