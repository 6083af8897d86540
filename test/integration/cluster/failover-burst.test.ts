import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { type ClusterNode, keySlot, type LocalCluster, startCluster } from "../../helpers/cluster.js";
import {
  type CountingReceiver,
  clusterDeployment,
  deliveryKey,
  startClusterDaemon,
  startCountingReceiver,
} from "../../helpers/cluster-daemon.js";
import { allDelivered, type E2eUser, type EmitResult, emit, hookUp, usersOnEveryShard } from "../../helpers/cluster-e2e.js";
import { type DaemonChild, killAll } from "../../helpers/process.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The acceptance test of Tributary on Redis Cluster (issue 13; design 4.12 item 5): 3 masters with
 * a replica each, `cluster-node-timeout` 1000, daemon processes with split roles and
 * REDIS_MIN_REPLICAS_ACK=1. A burst of emits over users on every shard runs while one master is
 * SIGKILLed. Every event acknowledged with 202 is delivered at least once; no daemon process exits;
 * refusals are 503 with Retry-After (never a 500 or a hang); the API answers 202 again for every
 * user once the cluster has failed over.
 *
 * With one replica per master and REDIS_MIN_REPLICAS_ACK=1, the promoted replica has no replica of
 * its own, so writes of its shards are refused (503) until one joins: the test restarts the killed
 * node once the failover is done (what an orchestrator does with a dead pod); it rejoins as a
 * replica of its successor. The unavailable windows are printed (`[cluster failover]`).
 *
 * The second test fails over another master with the worker process SIGKILLed at the same moment
 * (design 4.12's variant): a replacement worker takes over what the dead one held (outbox entries
 * by XAUTOCLAIM, active jobs by BullMQ's stalled check) and delivers every acknowledged event.
 */

const WORKFLOW = "p_burst";
/** Emit loops running at once. */
const LOOPS = 4;
const FAILOVER_TIMEOUT_MS = 3000;
/** How long after the kill every user must get a 202 again: failover (~2.5 s) + restart + a loaded machine. */
const RECOVERY_BOUND_MS = 60_000;
/** How much longer than the failover itself a master's users may go without a 202 (a loaded machine). */
const WINDOW_BOUND_MS = 30_000;
/** One request's bound while Redis fails over. */
const REQUEST_BOUND_MS = FAILOVER_TIMEOUT_MS * 2 + 8000;

let cluster: LocalCluster;
let rx: CountingReceiver;
const daemons: DaemonChild[] = [];
/** Processes a test killed on purpose. */
const killed = new Set<DaemonChild>();
const env = {
  REDIS_MIN_REPLICAS_ACK: "1",
  REDIS_REPLICA_ACK_TIMEOUT_MS: "1000",
  REDIS_FAILOVER_TIMEOUT_MS: String(FAILOVER_TIMEOUT_MS),
  // Retries span the failover: an attempt that fails while Redis is away is made again later.
  DELIVERY_RETRY_SCHEDULE: "500ms,1s,2s,4s,8s,16s",
};
let api: DaemonChild;
const { prefix, adminToken } = clusterDeployment();
let users: E2eUser[];

beforeAll(async () => {
  cluster = await startCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000 });
  rx = await startCountingReceiver();
  api = await startClusterDaemon("api", cluster, { roles: "api", prefix, adminToken, env });
  daemons.push(api);
  daemons.push(await startClusterDaemon("worker", cluster, { roles: "worker,scheduler", prefix, adminToken, env }));
  users = await usersOnEveryShard(api, adminToken, prefix, cluster, { min: 24 });
  for (const u of users) await hookUp(u, rx.url(`/to/${u.id}`), WORKFLOW);
}, 180_000);

afterAll(async () => {
  await killAll();
  await rx?.close();
  await cluster?.stop();
});

/**
 * Emits in LOOPS loops over every user; once 2 per user were acknowledged, SIGKILLs `victim` (and
 * the worker process, with `killWorker`: a replacement starts once the cluster has failed over),
 * waits for the failover, restarts the victim, and goes on until every user had a 202 after the
 * kill. Then asserts and prints (see the file's comment).
 */
async function burstThroughFailover(victim: ClusterNode, what: string, killWorker = false): Promise<void> {
  const victimUsers = users.filter((u) => u.nodePort === victim.port);
  expect(victimUsers.length).toBeGreaterThan(0);

  const results: EmitResult[] = [];
  let n = 0;
  let stop = false;
  let killedAt = 0;
  const okAfter = (u: E2eUser) => results.some((r) => r.user === u.id && r.at > killedAt && r.status === 202);
  const loop = async (k: number) => {
    for (let i = k; !stop; i += LOOPS) {
      const u = users[i % users.length] as E2eUser;
      results.push(await emit(api.url, u, WORKFLOW, ++n, REQUEST_BOUND_MS + 5000));
      if (killedAt > 0 && users.every(okAfter)) stop = true;
      if (killedAt > 0 && Date.now() > killedAt + RECOVERY_BOUND_MS) stop = true;
    }
  };
  const loops = Array.from({ length: LOOPS }, (_, k) => loop(k));
  const guard = setTimeout(() => {
    stop = true;
  }, 240_000);
  let failover = { waitedMs: 0, port: 0 };
  let restartedAt = 0;
  try {
    await waitFor(() => results.filter((r) => r.status === 202).length >= users.length * 2, {
      timeoutMs: 60_000,
      what: "a burst under way before the kill",
    });
    killedAt = Date.now();
    const worker = daemons.find((d) => d.name.startsWith("worker") && !d.hasExited());
    await Promise.all([cluster.kill(victim), killWorker ? worker?.kill("SIGKILL") : undefined]);
    const { newMaster, waitedMs } = await cluster.waitForFailover(victim, 60_000);
    failover = { waitedMs, port: newMaster.port };
    await cluster.restart(victim);
    restartedAt = Date.now();
    if (killWorker) {
      if (worker) killed.add(worker);
      daemons.push(await startClusterDaemon(`worker-${daemons.length}`, cluster, { roles: "worker,scheduler", prefix, adminToken, env }));
    }
    await Promise.all(loops);
  } finally {
    stop = true;
    clearTimeout(guard);
  }

  // The unavailable window of each master's users: the longest stretch without a 202 answered
  // to any of them, among the stretches that end after the kill (requests held through the
  // failover count as unavailable, not only refused ones).
  const windows = cluster.masters.map((m) => {
    const mine = new Set(users.filter((u) => u.nodePort === m.port).map((u) => u.id));
    const done = results
      .filter((r) => mine.has(r.user) && r.status === 202)
      .map((r) => r.at + r.ms)
      .sort((x, y) => x - y);
    let windowMs = 0;
    for (let i = 1; i < done.length; i++) {
      const [a, b] = [done[i - 1] as number, done[i] as number];
      if (b > killedAt) windowMs = Math.max(windowMs, b - Math.max(a, killedAt));
    }
    return {
      master: m.port,
      killed: m.port === victim.port,
      users: mine.size,
      refused: results.filter((r) => mine.has(r.user) && r.at > killedAt && r.status !== 202).length,
      windowMs,
    };
  });
  const acked = results.filter((r) => r.status === 202);
  const statuses = results.reduce<Record<string, number>>((acc, r) => {
    acc[r.status] = (acc[r.status] ?? 0) + 1;
    return acc;
  }, {});
  const slowest = Math.max(...results.map((r) => r.ms));
  console.info(
    `[cluster failover] killed ${victim.port} (${what}, ${victimUsers.length} users${killWorker ? ", and the worker process" : ""}); replica ${failover.port} took over ` +
      `${failover.waitedMs} ms after the kill; old master restarted at +${restartedAt - killedAt} ms; ` +
      `answers ${JSON.stringify(statuses)}, slowest ${slowest} ms; unavailable windows ${JSON.stringify(windows)}`,
  );

  // No daemon process exited (but the worker the test killed).
  for (const d of daemons) if (!killed.has(d)) expect(d.hasExited(), `${d.name} exited:\n${d.logs()}`).toBe(false);
  // Every user got a 202 again after the kill: within the failover time and a bound.
  expect(users.filter((u) => !okAfter(u)).map((u) => u.id)).toEqual([]);
  for (const w of windows) expect(w.windowMs).toBeLessThan(failover.waitedMs + WINDOW_BOUND_MS);
  // Refusals are 503 with Retry-After, never a 500 or a hang.
  const bad = results.filter((r) => r.status !== 202 && !(r.status === 503 && r.retryAfter !== null));
  const errorLines = () =>
    api
      .logs()
      .split("\n")
      .filter((l) => /"level":50|internal/.test(l))
      .slice(-10)
      .join("\n");
  expect(bad.slice(0, 10), `${bad.length} answers neither 202 nor 503; api errors:\n${errorLines()}`).toEqual([]);
  for (const r of results) expect(r.ms, `request ${r.n} took ${r.ms} ms`).toBeLessThan(REQUEST_BOUND_MS);
  // Nothing acknowledged was lost: every 202's event reaches the receiver at least once.
  const ackedKeys = acked.map((r) => deliveryKey(`/to/${r.user}`, r.id as string));
  await allDelivered(ackedKeys, rx.byEvent, killWorker ? 180_000 : 120_000);
  const dup = ackedKeys.filter((k) => (rx.byEvent.get(k) ?? 0) > 1).length;
  console.info(`[cluster failover] ${acked.length} acknowledged events delivered; ${dup} more than once`);
  for (const d of daemons) if (!killed.has(d)) expect(d.hasExited(), `${d.name} exited:\n${d.logs()}`).toBe(false);
}

describe("a master SIGKILLed in the middle of a burst of emits", () => {
  it("loses no acknowledged event, stops no daemon process, and serves every shard again after the failover", async () => {
    // The master of the deployment's global keys (users' API keys, the layout, the scheduler
    // lock), so the failover touches every request, and of some users' shards too.
    await burstThroughFailover(cluster.nodeForSlot(keySlot(createKeys(prefix).layout())), "global keys");
  }, 400_000);

  it("with the worker process SIGKILLed at the same time: a replacement delivers every acknowledged event", async () => {
    await cluster.waitHealthy(60_000);
    // A master untouched so far (it still has its replica).
    const globalMaster = cluster.nodeForSlot(keySlot(createKeys(prefix).layout()));
    const victim = cluster.masters.find((m) => m.port !== globalMaster.port);
    if (!victim) throw new Error("no other master");
    expect(await cluster.roleOf(victim)).toBe("master");
    await burstThroughFailover(victim, "a shard master", true);
  }, 400_000);
});
