import type { Cluster } from "ioredis";
import type { RedisClient } from "./context.js";
import { UnavailableError } from "../domain/errors.js";

/** What `ReplicaAck.begin` notes before a request's writes: each connection's connection count. */
export interface AckToken {
  readonly epochs: readonly number[];
}

/**
 * REDIS_MIN_REPLICAS_ACK (SPEC §8): after the writes a 2xx acknowledges, `WAIT <n> <timeout>` on
 * each connection those writes may have gone through (the request-path commands and the queue
 * producers). WAIT counts the replicas that have the connection's own last write, so it must be
 * sent on the connection that wrote (with auto-pipelining it still is: the same client, after the
 * write's reply); a WAIT on another connection would confirm nothing.
 *
 * - **Group commit.** One WAIT per connection at a time: a caller whose writes are done joins the
 *   next WAIT sent after the one in flight (that one may predate its writes). A WAIT blocks the
 *   connection in Redis until it returns, so a lost replica must not stack one WAIT per request.
 * - **Same connection, really.** A connection that reconnected between `begin` and the end of the
 *   WAIT (a failover) may have written to the old master and waited on the new one, which would
 *   confirm nothing: that counts as not confirmed.
 * - **Redis Cluster.** A Cluster client has one connection per master, and a request's writes may
 *   have gone through any of them, so the WAIT is sent on every master connection of the client and
 *   the least count wins. A master the request did not write to answers at once (nothing of this
 *   connection is pending there) with its connected replicas, so each master needs its replicas
 *   for any write to be acknowledged. A node added to or dropped from the client's pool (a
 *   failover: the old master's connection is dropped) counts as a reconnection.
 *
 * Fewer than `replicas` confirmations throw a 503 with `Retry-After: 1`; the write may still be
 * applied (and its event delivered): at least once.
 */
export class ReplicaAck {
  private readonly gates: WaitGate[];
  private readonly epochs: number[];

  constructor(
    connections: readonly RedisClient[],
    private readonly replicas: number,
    private readonly timeoutMs: number,
  ) {
    const unique = [...new Set(connections)];
    this.epochs = unique.map(() => 0);
    unique.forEach((c, i) => {
      const bump = () => {
        this.epochs[i] = (this.epochs[i] ?? 0) + 1;
      };
      c.on("connect", bump);
      if (c.isCluster) {
        c.on("+node", bump);
        c.on("-node", bump);
      }
    });
    this.gates = unique.map((c) => new WaitGate(c, replicas, timeoutMs));
  }

  /** Call before the writes. */
  begin(): AckToken {
    return { epochs: [...this.epochs] };
  }

  /** Call after the writes, before answering; throws UnavailableError when they are not confirmed. */
  async confirm(token: AckToken): Promise<void> {
    const counts = await Promise.all(this.gates.map((g) => g.wait()));
    const least = Math.min(...counts);
    if (this.epochs.some((e, i) => e !== token.epochs[i])) {
      throw new UnavailableError("Redis failed over during the request; the write may not be on a replica: retry", 1);
    }
    if (least < this.replicas) {
      throw new UnavailableError(
        `the write reached ${least} of ${this.replicas} required Redis replicas within ${this.timeoutMs} ms; it may still be applied: retry`,
        1,
      );
    }
  }
}

/** One WAIT in flight per connection; callers arriving meanwhile share the next one. */
class WaitGate {
  private inFlight: Promise<number> | undefined;
  private queued: Promise<number> | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly replicas: number,
    private readonly timeoutMs: number,
  ) {}

  wait(): Promise<number> {
    if (this.queued) return this.queued;
    const current = this.inFlight;
    if (!current) return this.send();
    const next = current.then(
      () => undefined,
      () => undefined,
    );
    this.queued = next.then(() => {
      this.queued = undefined;
      return this.send();
    });
    return this.queued;
  }

  private send(): Promise<number> {
    const p = waitOn(this.redis, this.replicas, this.timeoutMs);
    this.inFlight = p;
    const clear = () => {
      if (this.inFlight === p) this.inFlight = undefined;
    };
    p.then(clear, clear);
    return p;
  }
}

/** WAIT on one connection; on a Cluster, on each master connection of the client, the least count. */
async function waitOn(redis: RedisClient, replicas: number, timeoutMs: number): Promise<number> {
  if (!isCluster(redis)) return redis.wait(replicas, timeoutMs);
  const masters = redis.nodes("master");
  if (masters.length === 0) return 0;
  const counts = await Promise.all(
    masters.map((node) =>
      node.wait(replicas, timeoutMs).catch((err: Error) => {
        // The client's map is stale: this "master" is a replica now (a failed master restarted and
        // rejoined under its successor: "WAIT cannot be used with replica instances"), or the node
        // is going away. Nothing is confirmed there (a 503, not a 500); a slot refresh drops it.
        if (/replica/i.test(err.message)) void redis.refreshSlotsCache();
        return 0;
      }),
    ),
  );
  return Math.min(...counts);
}

const isCluster = (redis: RedisClient): redis is Cluster => redis.isCluster;
