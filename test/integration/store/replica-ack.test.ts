import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UnavailableError } from "../../../src/domain/errors.js";
import { ReplicaAck } from "../../../src/store/replica-ack.js";
import { type SentinelGroup, startSentinelGroup } from "../../helpers/sentinel.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * store/replica-ack.ts against a real master and replica (no sentinels): WAIT goes on the
 * connection that wrote (auto-pipelined, as the daemon's command connection is), callers share
 * WAITs, a stopped replica is a 503 with Retry-After: 1, and a reconnection between the writes and
 * the WAIT is never taken for a confirmation.
 */

/** Generous: a loaded machine's replica may take a while to answer GETACK. */
const ACK_TIMEOUT_MS = 2000;
let group: SentinelGroup;
let conn: Redis;
let master: number;

function connect(): Redis {
  // The daemon's command connection: auto-pipelined, fail fast.
  const c = new Redis({ port: master, host: "127.0.0.1", password: group.password, enableAutoPipelining: true, maxRetriesPerRequest: 2 });
  c.on("error", () => {});
  return c;
}

async function waitCalls(r: Redis): Promise<number> {
  const stats = await r.info("commandstats");
  return Number(/^cmdstat_wait:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
}

beforeAll(async () => {
  group = await startSentinelGroup({ replicas: 1, sentinels: 0 });
  master = group.nodes[0]?.port as number;
  conn = connect();
  await waitFor(async () => /slave0:.*state=online/.test(await conn.info("replication")), {
    timeoutMs: 30_000,
    intervalMs: 100,
    what: "the replica online",
  });
}, 60_000);

afterAll(async () => {
  conn?.disconnect();
  await group?.stop();
});

describe("ReplicaAck", () => {
  it("confirms writes on one replica, and callers in flight together share WAITs", async () => {
    const ack = new ReplicaAck([conn], 1, ACK_TIMEOUT_MS);
    const before = await waitCalls(conn);
    await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const token = ack.begin();
        await conn.set(`ack:${i}`, "v");
        await ack.confirm(token);
      }),
    );
    // 50 requests, not 50 WAITs: one in flight, those done meanwhile share the next (2 when every
    // write's reply arrives in one read; a few more when a loaded machine splits them).
    expect(await waitCalls(conn)).toBeLessThan(before + 25);
    expect(await waitCalls(conn)).toBeGreaterThan(before);
  });

  it("answers 503 with Retry-After: 1 when the replica does not confirm, and confirms again once it resumes", async () => {
    const replica = group.nodes[1];
    if (!replica) throw new Error("no replica");
    const ack = new ReplicaAck([conn], 1, ACK_TIMEOUT_MS);
    await replica.signal("SIGSTOP");
    try {
      const token = ack.begin();
      await conn.set("ack:stopped", "v");
      const err = await ack.confirm(token).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(UnavailableError);
      expect((err as UnavailableError).status).toBe(503);
      expect((err as UnavailableError).headers).toEqual({ "retry-after": "1" });
      expect((err as Error).message).toMatch(/0 of 1 required Redis replicas/);
    } finally {
      await replica.signal("SIGCONT");
    }
    // Once confirmed, the write is on the replica (WAIT covered the auto-pipelined write before it).
    const onReplica = new Redis({ port: replica.port, host: "127.0.0.1", password: group.password });
    try {
      await waitFor(
        async () => {
          const token = ack.begin();
          await conn.set("ack:resumed", "after");
          await ack.confirm(token);
          return (await onReplica.get("ack:resumed")) === "after";
        },
        { timeoutMs: 30_000, intervalMs: 100, what: "confirmations again after SIGCONT" },
      );
    } finally {
      onReplica.disconnect();
    }
  });

  it("does not confirm across a reconnection (a failover between the write and the WAIT)", async () => {
    const c = connect();
    try {
      await c.ping();
      const ack = new ReplicaAck([c], 1, ACK_TIMEOUT_MS);
      const token = ack.begin();
      await c.set("ack:reconnect", "v");
      c.disconnect(true);
      await waitFor(() => c.status === "ready", { what: "reconnected" });
      await expect(ack.confirm(token)).rejects.toThrow(/failed over during the request/);
      // A request that starts after the reconnection is confirmed as usual.
      const later = ack.begin();
      await c.set("ack:reconnect", "w");
      await ack.confirm(later);
    } finally {
      c.disconnect();
    }
  });
});
