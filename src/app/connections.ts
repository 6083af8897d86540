import type { Cluster, Redis, RedisOptions } from "ioredis";
import type { Logger } from "../observability/logger.js";
import type { RedisClient } from "../store/context.js";
import { knownClusterNodes } from "../store/server-info.js";
import { describeTarget, openClient, openClusterNode, type RedisTarget } from "./redis-client.js";

/**
 * The Redis connections of a process, each named. Request-path connections fail fast while Redis
 * is down (the API answers 503 instead of hanging); blocking readers and BullMQ workers retry
 * forever, as BullMQ requires.
 * - maxRetriesPerRequest: a command queued while disconnected fails after two reconnect attempts.
 * - commandTimeout: one that gets no reply in time fails too. Without it a stalled Redis (stopped
 *   process, dropped packets: the TCP connection stays up) held every request until it resumed.
 *   A write that timed out may still be applied once Redis resumes: its request answered 503, so
 *   the caller retries; an event is then recorded twice at worst, never acknowledged and lost.
 *
 * On a Redis Cluster (REDIS_CLUSTER_NODES) every name is a Cluster client of its own, with the same
 * profile on each node connection; a blocking command holds that client's connection to one node,
 * so blocking readers never share a client. Subscribers are the exception: a standalone connection
 * to one node at a time (`openClusterNode`), so that a lost subscription is seen.
 */
export interface Connections {
  /** Commands of request and worker paths (fail fast, auto-pipelined). */
  readonly commands: RedisClient;
  /**
   * BullMQ queues (producers): fail fast, without auto-pipelining. ioredis builds every pipeline by
   * copying each custom command of its connection, and BullMQ defines dozens (about 25 µs per
   * pipeline, measured), so per-command pipelines cost far more than they save there.
   */
  readonly queues: RedisClient;
  /** Fan-out's blocking outbox reads (patient). */
  readonly fanoutReads: RedisClient;
  /** The timer scheduler's blocking reads (patient). */
  readonly schedulerReads: RedisClient;
  /** BullMQ workers (patient; BullMQ duplicates it per worker). */
  readonly workers: RedisClient;
  /**
   * A new pub/sub connection (patient), closed with the others. Always one node (on a Cluster, one
   * node at a time: classic pub/sub reaches every node), so its `close`/`ready` tell a lost subscription.
   */
  subscriber(name: string): Redis;
  /**
   * A new connection for blocking reads (patient) that its owner closes when done (the live tail's
   * per-user readers come and go); one still open is closed with the others.
   */
  blocking(name: string): RedisClient;
  /** Quits every connection opened here; idempotent. */
  closeAll(): Promise<void>;
}

export interface ConnectionOptions {
  readonly commandTimeoutMs: number;
  readonly logger: Logger;
  /**
   * One connection under every name (the CLI: short-lived, nothing blocks). Default false: one
   * connection per name.
   */
  readonly shared?: boolean;
}

/** A connection error is logged at most this often per connection (an outage would flood the log). */
const ERROR_LOG_EVERY_MS = 5000;

/**
 * Opens the named connections to `target` (app/redis-client.ts: one node, a Sentinel master group,
 * a Cluster; a plain URL is one node).
 */
export function createConnections(target: RedisTarget | string, opts: ConnectionOptions): Connections {
  const to: RedisTarget =
    typeof target === "string" ? { kind: "single", url: target, auth: { username: undefined, password: undefined } } : target;
  const failFast = { maxRetriesPerRequest: 2, commandTimeout: opts.commandTimeoutMs, enableReadyCheck: true } as const;
  const patient = { maxRetriesPerRequest: null, enableReadyCheck: true } as const;
  const opened = new Set<RedisClient>();
  const address = describeTarget(to);
  const watch = <C extends RedisClient>(name: string, c: C): C => {
    let lastLog = 0;
    c.on("error", (err: Error) => {
      const now = Date.now();
      if (now - lastLog < ERROR_LOG_EVERY_MS) return;
      lastLog = now;
      opts.logger.warn({ connection: name, redis: address, err: err.message }, `redis connection error (${address}): ${err.message}`);
    });
    opened.add(c);
    return c;
  };
  const open = (name: string, options: RedisOptions): RedisClient => watch(name, openClient(to, options));
  const commands = open("commands", { ...failFast, enableAutoPipelining: true });
  // A Cluster's subscribers rotate over the nodes the command client knows (it follows failovers).
  const subscriber = (name: string): Redis =>
    to.kind === "cluster"
      ? watch(
          name,
          openClusterNode(to, patient, () => knownClusterNodes(commands as Cluster)),
        )
      : (open(name, patient) as Redis);
  const pick = (name: string, options: RedisOptions) => (opts.shared ? commands : open(name, options));
  let closing: Promise<void> | undefined;
  return {
    commands,
    queues: pick("queues", { ...failFast, enableAutoPipelining: false }),
    fanoutReads: pick("fanout-reads", patient),
    schedulerReads: pick("scheduler-reads", patient),
    workers: pick("workers", patient),
    subscriber,
    blocking(name) {
      const c = open(name, patient);
      c.once("end", () => opened.delete(c));
      return c;
    },
    closeAll() {
      closing ??= Promise.all([...opened].map((c) => c.quit().catch(() => c.disconnect()))).then(() => {});
      return closing;
    },
  };
}
