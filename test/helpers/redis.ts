import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, beforeEach, inject } from "vitest";
import type { RedisClient } from "../../src/store/context.js";
import { unlinkMatching } from "../../src/store/key-scan.js";
import { createKeys, type Keys } from "../../src/store/keys.js";

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

/**
 * Deletes every key under a prefix (used in afterAll/afterEach). On a Cluster client it scans every
 * master and unlinks per slot (src/store/key-scan.ts).
 */
export async function dropPrefix(redis: RedisClient, prefix: string): Promise<void> {
  await unlinkMatching(redis, `${prefix}:*`);
}

/**
 * One private key space shared by several simulated processes within a test file: `connect()`
 * hands out connections (each "process" takes its own), `redis` is a spare one for the test's own
 * reads and writes. Every connection is closed and the keys dropped after the file.
 */
export function sharedKeySpace(): { prefix: string; connect: () => Redis; redis: () => Redis } {
  const prefix = testPrefix();
  const connections: Redis[] = [];
  let spare: Redis | undefined;
  const connect = () => {
    const c = connectRedis();
    connections.push(c);
    return c;
  };
  beforeAll(() => {
    spare = connect();
  });
  afterAll(async () => {
    if (spare) await dropPrefix(spare, prefix);
    for (const c of connections) c.disconnect();
  });
  return {
    prefix,
    connect,
    redis: () => {
      if (!spare) throw new Error("sharedKeySpace().redis() is available from beforeAll on");
      return spare;
    },
  };
}

export interface KeySpace {
  prefix: string;
  keys: Keys;
  redis: Redis;
}

/**
 * A fresh key space for every test of the file: the returned object's fields are set before each
 * test (a new prefix, its keys and a connection); after it the keys are dropped and the connection
 * closed.
 */
export function keySpacePerTest(): KeySpace {
  const space = {} as KeySpace;
  beforeEach(() => {
    space.prefix = testPrefix();
    space.keys = createKeys(space.prefix);
    space.redis = connectRedis();
  });
  afterEach(async () => {
    await dropPrefix(space.redis, space.prefix);
    space.redis.disconnect();
  });
  return space;
}
