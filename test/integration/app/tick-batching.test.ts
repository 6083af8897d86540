import { afterAll, describe, expect, it } from "vitest";
import { openRedis, TickBatchedRedis } from "../../../src/app/redis-client.js";
import { dropPrefix, redisUrl, testPrefix } from "../../helpers/redis.js";
import { countSocketWrites, incrsFromCheckPhase } from "../../helpers/socket-writes.js";

/**
 * The daemon's request-path node client (app/redis-client.ts `TickBatchedRedis`, what `openRedis`
 * gives for `enableAutoPipelining`) writes the commands of one event-loop tick in one socket write,
 * in order, with the replies of plain commands; and `writeTogether` writes at once from a
 * `setImmediate` callback.
 */
const prefix = testPrefix();
const client = openRedis(
  { kind: "single", url: redisUrl(), auth: { username: undefined, password: undefined } },
  { maxRetriesPerRequest: 2, commandTimeout: 5000, enableAutoPipelining: true },
);
afterAll(async () => {
  await dropPrefix(client, prefix);
  await client.quit();
});

describe("the request-path node client", () => {
  it("sends one tick's commands in one socket write, in order", async () => {
    expect(client).toBeInstanceOf(TickBatchedRedis);
    const key = `${prefix}:n`;
    await client.del(key); // connected and ready
    const writes = countSocketWrites(client);
    let replies: unknown[];
    try {
      const sent: Promise<unknown>[] = [];
      for (let i = 0; i < 50; i++) sent.push(client.incr(key));
      sent.push(client.get(key));
      replies = await Promise.all(sent);
    } finally {
      writes.stop();
    }
    expect(replies).toEqual([...Array.from({ length: 50 }, (_, i) => i + 1), "50"]);
    // One write for the tick (without batching: one per command, 51).
    expect(writes.count()).toBeLessThanOrEqual(2);
    // Uncorked once the tick is over: a later command answers.
    await new Promise((r) => setImmediate(r));
    expect(client.stream.writableCorked).toBe(0);
    expect(await client.get(key)).toBe("50");
  });

  it("writes what writeTogether sends from a setImmediate callback at once, in one write", async () => {
    const key = `${prefix}:together`;
    await client.del(key);
    const writes = countSocketWrites(client);
    try {
      const { plain, together } = await incrsFromCheckPhase(client, writes, key);
      // A command sent in the check phase waits for the next turn's uncork.
      expect(plain.writes).toBe(0);
      expect(plain.value).toBe(1);
      expect(together.writes).toBe(1);
      expect(together.values).toEqual([2, 3, 4]);
    } finally {
      writes.stop();
    }
  });
});
