import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { inject } from "vitest";

/** The Redis URL found by the global setup. */
export function redisUrl(): string {
  return inject("redisUrl");
}

/** A fresh key prefix, so that a test never sees another test's keys. */
export function testPrefix(): string {
  return `t${randomBytes(5).toString("hex")}`;
}

/** A new connection to the test Redis. */
export function connectRedis(): Redis {
  return new Redis(redisUrl(), { maxRetriesPerRequest: null, lazyConnect: false });
}

/** Deletes every key under a prefix (used in afterAll/afterEach). */
export async function dropPrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await redis.unlink(...keys);
  } while (cursor !== "0");
}
