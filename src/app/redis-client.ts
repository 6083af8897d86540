import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";
import { StandaloneConnector } from "ioredis/built/connectors/index.js";
import type { HostPort } from "../config/host-list.js";
import type { Config } from "../config/schema.js";
import { SentinelRedis } from "./sentinel-client.js";

/**
 * Where the Redis of a deployment is (SPEC §8): one node (REDIS_URL or the embedded server), a
 * Sentinel-monitored master group, or a Redis Cluster. Built from the configuration once
 * (`redisTarget`); every connection of the daemon, the CLI and the start-up probe is opened from
 * it by `openRedis`, so all of them follow a failover the same way.
 */
export type RedisTarget =
  | { readonly kind: "single"; readonly url: string; readonly auth: RedisAuth }
  | {
      readonly kind: "sentinel";
      readonly sentinels: readonly HostPort[];
      readonly name: string;
      readonly auth: RedisAuth;
      readonly sentinelPassword: string | undefined;
      readonly failoverTimeoutMs: number;
    }
  | { readonly kind: "cluster"; readonly nodes: readonly HostPort[]; readonly auth: RedisAuth; readonly failoverTimeoutMs: number };

export interface RedisAuth {
  readonly username: string | undefined;
  readonly password: string | undefined;
}

/** The target of a configuration; `url` is REDIS_URL or the embedded server's, for the single shape. */
export function redisTarget(config: Pick<Config, "redisHa">, url: string | undefined): RedisTarget {
  const ha = config.redisHa;
  const auth = { username: ha.username, password: ha.password };
  switch (ha.shape.kind) {
    case "sentinel":
      return {
        kind: "sentinel",
        sentinels: ha.shape.sentinels,
        name: ha.shape.name,
        auth,
        sentinelPassword: ha.sentinelPassword,
        failoverTimeoutMs: ha.failoverTimeoutMs,
      };
    case "cluster":
      return { kind: "cluster", nodes: ha.shape.nodes, auth, failoverTimeoutMs: ha.failoverTimeoutMs };
    default:
      if (url === undefined) throw new Error("no Redis URL: set REDIS_URL, REDIS_SENTINELS or start the embedded server");
      return { kind: "single", url, auth };
  }
}

/** Where `target` is, for a person reading a log line: addresses and names, never a password. */
export function describeTarget(target: RedisTarget): string {
  const list = (nodes: readonly HostPort[]) => nodes.map((n) => `${n.host}:${n.port}`).join(", ");
  switch (target.kind) {
    case "sentinel":
      return `the Sentinels ${list(target.sentinels)} (master group ${target.name})`;
    case "cluster":
      return `the Redis Cluster nodes ${list(target.nodes)}`;
    default: {
      try {
        const u = new URL(target.url);
        return `${u.protocol === "rediss:" ? "rediss://" : ""}${u.hostname}:${u.port || "6379"}`;
      } catch {
        return "REDIS_URL (not a URL)";
      }
    }
  }
}

/** The request-path command deadline: REDIS_COMMAND_TIMEOUT_MS, never past REDIS_FAILOVER_TIMEOUT_MS. */
export function requestCommandTimeoutMs(config: Pick<Config, "redisCommandTimeoutMs" | "redisHa">): number {
  return Math.min(config.redisCommandTimeoutMs, config.redisHa.failoverTimeoutMs);
}

/** `url` with the username/password of `auth` (which win over the URL's own). */
function withAuth(url: string, auth: RedisAuth): string {
  if (auth.username === undefined && auth.password === undefined) return url;
  const u = new URL(url);
  if (auth.username !== undefined) u.username = encodeURIComponent(auth.username);
  if (auth.password !== undefined) u.password = encodeURIComponent(auth.password);
  return u.toString();
}

/** A replica that was the master answers writes with READONLY until the client reconnects. */
const isReadOnly = (err: Error): boolean => err.message.startsWith("READONLY");

/**
 * Opens one connection to `target` with `options` (the caller's profile: fail-fast or patient).
 * - single: exactly as before this module existed (`new Redis(url, options)`); REDIS_USERNAME and
 *   REDIS_PASSWORD, when set, replace those of the URL.
 * - `enableAutoPipelining` in `options` gives a tick-batched client (`TickBatchedRedis`: the
 *   commands of one event-loop tick in one socket write) with ioredis's auto-pipeline off, on one
 *   node and on a Sentinel group alike.
 * - sentinel: the master of the group, asked of the sentinels at every (re)connection; a sentinel
 *   subscription (`failoverDetector`) reconnects at once on +switch-master; a READONLY answer (the
 *   node was demoted under us) reconnects and resends the command; a node that does not answer a
 *   connection attempt is given up after REDIS_FAILOVER_TIMEOUT_MS; a client that ioredis ended
 *   by itself during a failover connects again (app/sentinel-client.ts).
 * - cluster: use `openCluster` (a Cluster client) or `openClusterNode` (one node, for pub/sub);
 *   throws here, so that no caller opens a single-node client to one node of a Cluster by mistake.
 */
export function openRedis(target: RedisTarget, redisOptions: RedisOptions): Redis {
  // `enableAutoPipelining` asks for a tick-batched client (below), never ioredis's auto-pipeline.
  const batched = redisOptions.enableAutoPipelining === true;
  const options = batched ? { ...redisOptions, enableAutoPipelining: false } : redisOptions;
  switch (target.kind) {
    case "single":
      return new (batched ? TickBatchedRedis : Redis)(withAuth(target.url, target.auth), options);
    case "sentinel":
      return new (batched ? TickBatchedSentinelRedis : SentinelRedis)({
        ...options,
        sentinels: target.sentinels.map((s) => ({ host: s.host, port: s.port })),
        name: target.name,
        role: "master",
        ...credentials(target.auth),
        ...(target.sentinelPassword === undefined ? {} : { sentinelPassword: target.sentinelPassword }),
        failoverDetector: true,
        connectTimeout: target.failoverTimeoutMs,
        sentinelCommandTimeout: Math.min(target.failoverTimeoutMs, 2000),
        reconnectOnError: (err) => (isReadOnly(err) ? 2 : false),
      });
    case "cluster":
      throw new Error("openRedis: a Redis Cluster target needs openCluster or openClusterNode");
  }
}

/** Opens a client for `target` with `options`: a Cluster client for the cluster shape, else `openRedis`. */
export function openClient(target: RedisTarget, options: RedisOptions): Redis | Cluster {
  return target.kind === "cluster" ? openCluster(target, options) : openRedis(target, options);
}

/** How long a Cluster client waits before retrying a command refused by a failover (connection lost, CLUSTERDOWN). */
const CLUSTER_RETRY_DELAY_MS = 200;
/** MOVED/ASK redirections (slot migrations) a command may follow, on top of the failover retries. */
const CLUSTER_REDIRECTIONS = 16;

/**
 * The retries a Cluster command gets (ioredis's `maxRedirections` counts every retry: MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN and a lost node): enough for REDIS_FAILOVER_TIMEOUT_MS of failover
 * (node timeout + election) at `CLUSTER_RETRY_DELAY_MS` each, plus some redirections. A command
 * therefore rides through a failover that ends within the bound and fails after it.
 */
export function clusterRedirections(failoverTimeoutMs: number): number {
  return Math.ceil(failoverTimeoutMs / CLUSTER_RETRY_DELAY_MS) + CLUSTER_REDIRECTIONS;
}

/**
 * A Redis Cluster client (REDIS_CLUSTER_NODES). Reads and writes go to masters (`scaleReads:
 * "master"`: a replica may lag behind an acknowledged write); MOVED/ASK are followed, a lost node,
 * CLUSTERDOWN and TRYAGAIN retried (a failover, a slot migration) for about
 * REDIS_FAILOVER_TIMEOUT_MS (`clusterRedirections`), every node is reached with the deployment's
 * credentials. `redisOptions` is the caller's profile, applied to each node connection: fail-fast
 * (2 reconnect attempts, a command timeout per attempt) or patient (`maxRetriesPerRequest: null`,
 * which BullMQ requires of a Cluster's node options too). `enableAutoPipelining` in it asks for
 * batching: a `TickBatchedCluster`, which writes each tick's commands in one write per node
 * (ioredis's own Cluster auto-pipelining stays off).
 */
export function openCluster(
  target: Extract<RedisTarget, { kind: "cluster" }>,
  redisOptions: RedisOptions,
  /** Overrides for a special use (the start-up probe gives up instead of retrying). */
  clusterOptions: Partial<ClusterOptions> = {},
): Cluster {
  const { enableAutoPipelining, lazyConnect, ...nodeOptions } = redisOptions;
  const options: ClusterOptions = {
    scaleReads: "master",
    enableReadyCheck: true,
    // Never ioredis's own auto-pipelining on a Cluster: `TickBatchedCluster` batches instead.
    enableAutoPipelining: false,
    // Kept should auto-pipelining ever be turned on: ioredis finds no key in XGROUP/XINFO (it
    // follows a subcommand), so it would auto-pipeline them by the slot of "CREATE" together with
    // commands for other nodes, and a MOVED answer inside such a mixed pipeline is not followed
    // (fan-out's start failed with MOVED).
    autoPipeliningIgnoredCommands: ["xgroup", "xinfo"],
    retryDelayOnFailover: CLUSTER_RETRY_DELAY_MS,
    retryDelayOnClusterDown: CLUSTER_RETRY_DELAY_MS,
    retryDelayOnTryAgain: 100,
    retryDelayOnMoved: 0,
    maxRedirections: clusterRedirections(target.failoverTimeoutMs),
    redisOptions: {
      ...nodeOptions,
      ...credentials(target.auth),
      connectTimeout: target.failoverTimeoutMs,
      reconnectOnError: (err) => (isReadOnly(err) ? 2 : false),
    },
    lazyConnect: lazyConnect ?? false,
    ...clusterOptions,
  };
  const seeds = target.nodes.map((n) => ({ host: n.host, port: n.port }));
  const cluster = enableAutoPipelining === true ? new TickBatchedCluster(seeds, options) : new Cluster(seeds, options);
  if (nodeOptions.commandTimeout !== undefined) failFastWhileLost(cluster);
  return cluster;
}

/**
 * A Cluster client whose commands of one event-loop tick share one socket write per node, as
 * auto-pipelining does, without ioredis's Cluster auto-pipeline. That one builds an ioredis
 * `Pipeline` per node and tick (copying every custom command of the client onto it), computes each
 * command's slot twice (to pick the pipeline, then to check the pipeline's slots in `exec`), wraps
 * each command in a promise and a callback, and keeps the tick's commands reachable until the
 * node answers, long enough for the young-generation collector to promote them: profiled under
 * single emits, that made the daemon on a 3-master cluster spend about 1.45× the CPU per emit of
 * the same daemon on one node, a third of the difference in garbage collection
 * (docs/performance.md "Redis Cluster"). Here each command goes through `Cluster.sendCommand`
 * as without auto-pipelining (its slot computed once, MOVED/ASK/TRYAGAIN/CLUSTERDOWN and a lost
 * node handled per command, the offline queue as configured), and the first command of a tick
 * corks the socket of every ready master; a `setImmediate` uncorks them, when ioredis would have
 * flushed its auto-pipelines. Order per node is the order of `sendCommand` calls, as before.
 */
class TickBatchedCluster extends Cluster {
  // No field initialisers: ioredis's constructor runs (and may send) before they would.
  private ticks: TickCorks | undefined;

  override sendCommand(...call: Parameters<Cluster["sendCommand"]>): unknown {
    if (this.status === "ready") this.corks().beforeSend();
    return super.sendCommand(...call);
  }

  /** Store/script.ts `writeTogether`: the masters' writes of `send` at once (TickCorks). */
  writeTogether(send: () => void): void {
    if (this.status === "ready") this.corks().writeTogether(send);
    else send();
  }

  private corks(): TickCorks {
    this.ticks ??= new TickCorks(() => this.nodes("master").map((node) => (node.status === "ready" ? node.stream : undefined)));
    return this.ticks;
  }
}

/** A socket as a tick-batched client corks it. */
type Corkable = { readonly writableCorked: number; cork(): void; uncork(): void };

/**
 * The tick batching of a client's sockets (every ready master of a Cluster, the one socket of a
 * node client): the first command of an event-loop tick corks them and a `setImmediate` uncorks
 * them; `writeTogether` corks them around `send` and writes at once (for calls made in a
 * `setImmediate` callback, where the tick's own uncork would wait a whole turn). A socket corked
 * by someone else is left to them.
 */
class TickCorks {
  /** The sockets corked in this tick (possibly none); undefined when no cork is in place. */
  private corked: Corkable[] | undefined;

  constructor(private readonly sockets: () => readonly (Corkable | undefined)[]) {}

  /** Before a command is sent: the tick's first corks the sockets until its `setImmediate`. */
  beforeSend(): void {
    if (this.corked !== undefined) return;
    const corked = this.cork();
    if (corked.length === 0) return;
    this.corked = corked;
    setImmediate(() => {
      this.corked = undefined;
      for (const s of corked) s.uncork();
    });
  }

  writeTogether(send: () => void): void {
    if (this.corked !== undefined) {
      send();
      return;
    }
    const corked = this.cork();
    this.corked = corked;
    try {
      send();
    } finally {
      this.corked = undefined;
      for (const s of corked) s.uncork();
    }
  }

  private cork(): Corkable[] {
    const corked: Corkable[] = [];
    for (const socket of this.sockets()) {
      if (socket === undefined || socket.writableCorked > 0) continue;
      socket.cork();
      corked.push(socket);
    }
    return corked;
  }
}

/** A node client class (`Redis`, `SentinelRedis`). */
// biome-ignore lint/suspicious/noExplicitAny: TypeScript's mixin classes need exactly `any[]` constructor arguments.
type NodeClientClass = new (...args: any[]) => Redis;

/**
 * A node client (one Redis, a Sentinel group's master) whose commands of one event-loop tick share
 * one socket write, as ioredis's auto-pipelining does, without its `Pipeline`s (`TickCorks`); each
 * command goes through `sendCommand` as without auto-pipelining (order, replies, timeouts, the
 * offline queue: ioredis's). An auto-pipeline is an ioredis `Pipeline` per tick, which copies the
 * client's custom commands onto itself and wraps every command in a promise and a callback; its
 * objects outlived young-generation collections under load (docs/decisions.md "Tick-batched node
 * clients"). The Cluster client does the same per master (`TickBatchedCluster`).
 */
function tickBatched<Base extends NodeClientClass>(base: Base) {
  return class TickBatched extends base {
    // No field initialisers: ioredis's constructor runs (and may send) before they would.
    private ticks: TickCorks | undefined;

    override sendCommand(...call: Parameters<Redis["sendCommand"]>): ReturnType<Redis["sendCommand"]> {
      // A command with its own stream (ioredis's connection set-up) is written as it comes.
      if (call[1] === undefined && this.status === "ready") this.corks().beforeSend();
      return super.sendCommand(...call);
    }

    /** Store/script.ts `writeTogether`: the writes of `send` at once (TickCorks). */
    writeTogether(send: () => void): void {
      if (this.status === "ready") this.corks().writeTogether(send);
      else send();
    }

    private corks(): TickCorks {
      this.ticks ??= new TickCorks(() => [this.stream]);
      return this.ticks;
    }
  };
}

/** One Redis node, tick-batched (`openRedis` with `enableAutoPipelining`). */
export const TickBatchedRedis = tickBatched(Redis);
/** A Sentinel group's master, tick-batched. */
export const TickBatchedSentinelRedis = tickBatched(SentinelRedis);

/**
 * A fail-fast (request-path) Cluster client answers at once while it has lost every node. Once its
 * node pool drains, ioredis closes the client and reconnects it over and over, and a command sent
 * meanwhile waits in the client's offline queue with no deadline (the per-node command timeout
 * starts only once a node takes the command): during a whole-cluster outage requests would hang
 * instead of answering 503 within REDIS_FAILOVER_TIMEOUT_MS (measured: a GET never returned). From
 * `close` until the client is `ready` again its offline queue is off, so a command fails at once
 * ("Cluster isn't ready", or "Connection is closed" for a node still connecting), which the API
 * maps to 503. The first connection keeps the queue (commands sent before the first `ready` wait
 * for it), and nothing changes while the client is ready, a single master's failover included.
 */
function failFastWhileLost(cluster: Cluster): void {
  cluster.on("close", () => {
    cluster.options.enableOfflineQueue = false;
  });
  cluster.on("ready", () => {
    cluster.options.enableOfflineQueue = true;
  });
}

const credentials = (auth: RedisAuth): Pick<RedisOptions, "username" | "password"> => ({
  ...(auth.username === undefined ? {} : { username: auth.username }),
  ...(auth.password === undefined ? {} : { password: auth.password }),
});

/**
 * A standalone connection to one node of a Cluster, moving to the next node at every
 * (re)connection: for pub/sub, whose classic messages the cluster bus forwards to every node. An
 * ioredis Cluster subscriber moves to another node on its own and says nothing (design 4.7: no
 * `close`, no `ready`, a message lost), so the invalidation feed could not tell that its cache
 * missed a message; this connection emits `close`/`reconnecting`/`ready` as a single node does,
 * and the feed flushes and resubscribes as it does there. `nodes()` gives the candidates at each
 * attempt (the known nodes of a Cluster client, which follows failovers and new nodes), the seeds
 * when it has none. A node is tried for at most REDIS_FAILOVER_TIMEOUT_MS.
 */
export function openClusterNode(
  target: Extract<RedisTarget, { kind: "cluster" }>,
  options: RedisOptions,
  nodes: () => readonly HostPort[] = () => [],
): Redis {
  const seeds = target.nodes;
  let turn = Math.floor(Math.random() * 1024);
  class RotatingConnector extends StandaloneConnector {
    override connect(onError: Parameters<StandaloneConnector["connect"]>[0]) {
      const known = nodes();
      const list = known.length > 0 ? known : seeds;
      const next = list[turn++ % list.length] ?? seeds[0];
      if (next) Object.assign(this.options, { host: next.host, port: next.port });
      return super.connect(onError);
    }
  }
  const first = seeds[0];
  return new Redis({
    ...options,
    ...(first ? { host: first.host, port: first.port } : {}),
    ...credentials(target.auth),
    connectTimeout: target.failoverTimeoutMs,
    // Reconnect quickly: the next attempt goes to another node.
    retryStrategy: (times) => Math.min(50 * times, 1000),
    Connector: RotatingConnector as unknown as RedisOptions["Connector"],
  });
}
