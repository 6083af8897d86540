import type { Cluster, Redis } from "ioredis";
import type { RandomBytes } from "../domain/ids.js";
import type { Keys } from "./keys.js";

/** A connection to the deployment's Redis: one node (or a Sentinel group's master), or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** What every store needs: one Redis connection, the key space, and injected time and randomness. */
export interface StoreContext {
  readonly redis: RedisClient;
  readonly keys: Keys;
  /** Milliseconds since the epoch. */
  readonly now: () => number;
  readonly randomBytes: RandomBytes;
}

export const epochSeconds = (ms: number): number => Math.floor(ms / 1000);

/** Parses a JSON value stored by this process; a corrupt value reads as absent rather than crashing a request. */
export function parseStored<T>(raw: string | null | undefined): T | undefined {
  if (raw === null || raw === undefined) return undefined;
  try {
    return JSON.parse(raw) as T;
  } catch {
    return undefined;
  }
}
