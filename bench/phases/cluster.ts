/**
 * The daemon on a Redis Cluster (issue 13 item 7): the same daemon build, settings and load on the
 * bench's single redis-server and on a local 3-master Redis Cluster on loopback
 * (test/helpers/cluster.ts `startCluster`), one after the other in the same run. Each side is a
 * one-process daemon of this phase's own (the bench's deployment is stopped first), with a bench
 * user, a webhook on the bench's receiver and one subscription. Two loads per side:
 * - single emits to a workflow nothing subscribes to (the `single` phase's load: closed loop,
 *   warm-up, then measured, fan-out waited for);
 * - single emits to a workflow the webhook subscribes to, relayed end to end to the receiver (the
 *   relay phase's row 9: bench/relay.ts).
 * The figures: daemon CPU per event (target: the cluster's ≤ 1.3× the single node's, reported, not
 * asserted), throughput, and Redis CPU per event summed over the cluster's masters against the one
 * redis-server. Opt-in (BENCH_PHASES=cluster): about a minute with the default duration.
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Queue } from "bullmq";
import { Cluster, Redis } from "ioredis";
import { outboxLength } from "../../src/store/outbox-stream.js";
import { type LocalCluster, startCluster } from "../../test/helpers/cluster.js";
import type { BenchContext, Phase } from "../context.js";
import { apiData, type DaemonProcess, startDaemonProcess } from "../daemon-process.js";
import { hammer, smallEvent } from "../load.js";
import { type Cost, startMeter } from "../meter.js";
import { relayRun } from "../relay.js";
import { CLUSTER_CPU_TARGET, type ClusterResult, type ClusterSide } from "../report.js";
import { RUNTIME_DAEMON_ENV } from "../runtime.js";
import { fmt, sleep } from "../stats.js";

/** Masters of the local cluster. */
const MASTERS = 3;
/** Nothing subscribes to it: the record script writes no outbox entry (the `single` phase's workflow). */
const INGEST_WORKFLOW = "p_bench_ingest";
/** The relayed workflow: only this phase's webhook subscribes to it. */
const RELAY_WORKFLOW = "p_bench_cluster_relay";
/** How long the deliveries of the relay load may take after it stopped, s. */
const RELAY_DEADLINE_S = 60;
/** BENCH_CLUSTER_ROUNDS: how many times each load runs on both sides (alternating which goes first). */
const ROUNDS = Math.max(1, Math.floor(Number(process.env.BENCH_CLUSTER_ROUNDS)) || 1);
/** How long a daemon may take to become quiet (outbox empty, no delivery job), s. */
const QUIET_DEADLINE_S = 90;

/** A daemon of this phase and what measures it. */
interface Side {
  readonly name: "single" | "cluster";
  readonly daemon: DaemonProcess;
  /** Its bench user's API key. */
  readonly key: string;
  /** The redis-server processes it uses, by meter name ("redis", or "redis:<port>" per master). */
  readonly redisPids: Readonly<Record<string, number | undefined>>;
  /** One connection per redis-server, for INFO commandstats. */
  readonly servers: readonly Redis[];
  /** A client of its Redis (one node or the cluster) for the quiet check. */
  readonly client: Redis | Cluster;
  readonly deliveryQueue: Queue;
  /** Stops the daemon and closes the connections (idempotent). */
  close(): Promise<void>;
}

const daemonAlive = (d: DaemonProcess) => {
  const gone = d.child.exited();
  if (gone) throw new Error(`${d.child.name} crashed (${JSON.stringify(gone)}):\n${d.child.tail()}`);
};

/** Waits until the side's shard outboxes are empty and no delivery job waits or runs. */
async function quiesce(ctx: BenchContext, s: Side, label: string): Promise<void> {
  const start = performance.now();
  for (;;) {
    daemonAlive(s.daemon);
    const outbox = await outboxLength(s.client, ctx.keys);
    const c = await s.deliveryQueue.getJobCounts("wait", "active", "delayed", "prioritized");
    const busy = (c.wait ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
    if (outbox === 0 && busy === 0) break;
    if (performance.now() - start > QUIET_DEADLINE_S * 1000) {
      throw new Error(`${s.name} ${label}: daemon still busy after ${QUIET_DEADLINE_S} s (outbox ${outbox}, jobs ${busy})`);
    }
    await sleep(100);
  }
  ctx.log(`  ${s.name} ${label}: quiet after ${fmt(performance.now() - start)} ms`);
}

const meterOf = (s: Side) => startMeter({ daemon: s.daemon.child.pid, ...s.redisPids, bench: process.pid }, s.servers);

/** Starts a daemon on `redis`, with a bench user, a webhook on the receiver and the relay workflow subscribed. */
async function startSide(
  ctx: BenchContext,
  name: Side["name"],
  redis: { url: string; pid: number | undefined } | LocalCluster,
): Promise<Side> {
  const adminToken = `bench-admin-${randomBytes(8).toString("hex")}`;
  const onCluster = "seedList" in redis;
  const daemon = await startDaemonProcess(
    {
      redisUrl: onCluster ? "" : redis.url,
      ...(onCluster ? { redisClusterNodes: redis.seedList } : {}),
      adminToken,
      env: RUNTIME_DAEMON_ENV,
    },
    `daemon(${name})`,
  );
  ctx.cleanups.push(() => daemon.stop());
  const user = await apiData<{ api_key: string }>(
    daemon.url,
    adminToken,
    "POST",
    "/admin/users",
    { username: `bench-${name}`, email: `bench-${name}@example.com`, plan: "paid" },
    201,
  );
  const hook = await apiData<{ id: string }>(
    daemon.url,
    user.api_key,
    "POST",
    "/v1/webhooks",
    { url: ctx.receiver.url, name: `bench ${name}` },
    200,
  );
  await apiData(daemon.url, user.api_key, "POST", "/v1/subscriptions", { emitter_id: RELAY_WORKFLOW, listener_id: hook.id }, 200);
  const servers = onCluster
    ? redis.nodes.map((n) => new Redis({ host: "127.0.0.1", port: n.port, maxRetriesPerRequest: null }))
    : [new Redis(redis.url, { maxRetriesPerRequest: null })];
  const client = onCluster ? new Cluster([...redis.seeds], { redisOptions: { maxRetriesPerRequest: null } }) : (servers[0] as Redis);
  client.on("error", () => {}); // a node going away at the end; the quiet check fails loudly anyway
  const deliveryQueue = new Queue("delivery", { connection: client, prefix: ctx.keys.queuePrefix("delivery") });
  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      await daemon.stop();
      await deliveryQueue.close().catch(() => {});
      for (const r of servers) r.disconnect();
      client.disconnect();
    })();
    return closing;
  };
  const redisPids: Record<string, number | undefined> = onCluster
    ? Object.fromEntries(redis.nodes.map((n) => [`redis:${n.port}`, n.pid]))
    : { redis: redis.pid };
  return { name, daemon, key: user.api_key, redisPids, servers, client, deliveryQueue, close };
}

/** The `single` phase's load on a side: closed-loop single emits, fan-out waited for before the meter is read. */
async function ingest(ctx: BenchContext, s: Side): Promise<ClusterSide["ingest"]> {
  const S = ctx.settings;
  const url = `${s.daemon.url}/v1/workflows/${INGEST_WORKFLOW}/events`;
  const headers = { authorization: `Bearer ${s.key}` };
  const body = JSON.stringify({ event: smallEvent(1) });
  ctx.log(`cluster phase, ${s.name}: single emits, ${S.durationS}s, ${S.connections} connections, after a ${S.warmupS} s warm-up`);
  await hammer({ url, body, headers, durationS: S.warmupS, connections: S.connections });
  const meter = await meterOf(s);
  const r = await hammer({ url, body, headers, durationS: S.durationS, connections: S.connections });
  await quiesce(ctx, s, "fan-out of the ingested events");
  const cost = await meter(r.ok);
  daemonAlive(s.daemon);
  ctx.log(`  ${fmt(r.reqPerSec)} req/s; ${describe(cost)} per emit; other CPU ${Math.round(cost.pct.other ?? 0)} %`);
  return { ...r, cost };
}

/** Row 9's load on a side: single emits relayed to the receiver, priced per delivered event. */
async function relay(ctx: BenchContext, s: Side): Promise<ClusterSide["relay"]> {
  const S = ctx.settings;
  ctx.log(`cluster phase, ${s.name}: relay to a webhook, ${S.durationS}s, ${S.connections} connections, after a ${S.warmupS} s warm-up`);
  const r = await relayRun(
    {
      receiver: ctx.receiver,
      connections: S.connections,
      durationS: S.durationS,
      warmupS: S.warmupS,
      deadlineS: RELAY_DEADLINE_S,
      meter: () => meterOf(s),
      quiesce: (label) => quiesce(ctx, s, label),
      ensureAlive: () => daemonAlive(s.daemon),
      log: ctx.log,
    },
    {
      variant: "single",
      url: `${s.daemon.url}/v1/workflows/${RELAY_WORKFLOW}/events`,
      headers: { authorization: `Bearer ${s.key}` },
      body: JSON.stringify({ event: smallEvent(1) }),
      expect: 202,
    },
  );
  ctx.log(
    `  ${fmt(r.perSec)} delivered/s (${r.delivered}/${r.expected} in ${fmt(r.spanS, 1)} s${r.complete ? "" : ", DEADLINE HIT"}); ` +
      `${describe(r.cost)} per delivered event; other CPU ${Math.round(r.cost.pct.other ?? 0)} %`,
  );
  await quiesce(ctx, s, "after the relay");
  return r;
}

/** Redis CPU per unit, summed over every redis-server of a side. */
export const redisUs = (c: Cost) =>
  Object.entries(c.usPerUnit)
    .filter(([k]) => k === "redis" || k.startsWith("redis:"))
    .reduce((a, [, v]) => a + v, 0);

const describe = (c: Cost) =>
  `${fmt(c.usPerUnit.daemon ?? Number.NaN)} µs daemon + ${fmt(redisUs(c))} µs redis CPU, ${fmt(c.redisPerUnit, 1)} Redis cmds`;

export const cluster: Phase = {
  name: "cluster",
  needs: ["daemon", "worker"],
  async run(ctx) {
    // Two daemons of this phase's own, one at a time under load: the bench's deployment goes.
    await ctx.stopDeployment();
    if (ctx.split) ctx.log("cluster phase: one-process daemons on both sides (BENCH_SPLIT applies to the bench's deployment only)");
    ctx.log(`cluster phase: starting a local Redis Cluster of ${MASTERS} masters`);
    const t0 = performance.now();
    const cl = await startCluster({ masters: MASTERS });
    ctx.cleanups.push(() => cl.stop());
    const clusterStartS = (performance.now() - t0) / 1000;
    ctx.log(`  cluster up in ${fmt(clusterStartS, 1)} s: ${cl.seedList}`);
    const started: Side[] = [];
    try {
      const single = await startSide(ctx, "single", ctx.redisServer);
      started.push(single);
      const onCluster = await startSide(ctx, "cluster", cl);
      started.push(onCluster);
      const sides = [single, onCluster] as const;
      for (const s of sides) await quiesce(ctx, s, "before the load");
      // Each round measures both sides, one after the other, in alternating order (a busy
      // neighbour then weighs on both the same way over the rounds); the report shows the round
      // of the median ratio and lists every round's.
      type Pair<T> = { single: T; cluster: T };
      const ingests: Pair<ClusterSide["ingest"]>[] = [];
      const relays: Pair<ClusterSide["relay"]>[] = [];
      const orderOf = (round: number) => (round % 2 === 0 ? sides : ([onCluster, single] as const));
      for (let round = 0; round < ROUNDS; round++) {
        const pair: Partial<Pair<ClusterSide["ingest"]>> = {};
        for (const s of orderOf(round)) pair[s.name] = await ingest(ctx, s);
        ingests.push(pair as Pair<ClusterSide["ingest"]>);
      }
      for (let round = 0; round < ROUNDS; round++) {
        const pair: Partial<Pair<ClusterSide["relay"]>> = {};
        for (const s of orderOf(round)) pair[s.name] = await relay(ctx, s);
        relays.push(pair as Pair<ClusterSide["relay"]>);
      }
      const cpuRatio = (p: Pair<{ cost: Cost }>) =>
        (p.cluster.cost.usPerUnit.daemon ?? Number.NaN) / (p.single.cost.usPerUnit.daemon ?? Number.NaN);
      /** The pair of the median ratio (the lower middle one of an even count). */
      const median = <T extends { cost: Cost }>(pairs: Pair<T>[]): Pair<T> =>
        [...pairs].sort((a, b) => cpuRatio(a) - cpuRatio(b))[Math.floor((pairs.length - 1) / 2)] as Pair<T>;
      const ingestMedian = median(ingests);
      const relayMedian = median(relays);
      const result: ClusterResult = {
        masters: MASTERS,
        clusterStartS,
        deadlineS: RELAY_DEADLINE_S,
        rounds: ROUNDS,
        cpuRatios: { ingest: ingests.map(cpuRatio), relay: relays.map(cpuRatio) },
        single: { ingest: ingestMedian.single, relay: relayMedian.single },
        cluster: { ingest: ingestMedian.cluster, relay: relayMedian.cluster },
      };
      for (const [label, pairs] of [
        ["single emits", ingests],
        ["relay", relays],
      ] as const) {
        ctx.log(
          `  cluster / single, ${label}: daemon CPU per event ${pairs.map((p) => `${fmt(cpuRatio(p), 2)}×`).join(", ")} (target ≤ ${CLUSTER_CPU_TARGET}×), ` +
            `Redis CPU per event ${pairs.map((p) => `${fmt(redisUs(p.cluster.cost) / redisUs(p.single.cost), 2)}×`).join(", ")}`,
        );
      }
      return { cluster: result };
    } finally {
      for (const s of started) await s.close();
      await cl.stop();
    }
  },
};
