import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalCluster, startCluster } from "../../helpers/cluster.js";
import {
  type CountingReceiver,
  clusterDeployment,
  deliveryKey,
  startClusterDaemon,
  startCountingReceiver,
} from "../../helpers/cluster-daemon.js";
import { allDelivered, type E2eUser, emit, hookUp, usersOnEveryShard } from "../../helpers/cluster-e2e.js";
import { client } from "../../helpers/daemon.js";
import { type DaemonChild, killAll } from "../../helpers/process.js";
import { waitFor } from "../../helpers/wait.js";
import { HTTP_ESM } from "../api/support.js";

/**
 * Tributary on a real 3-master Redis Cluster, end to end (issue 13, SPEC §8): two daemon processes
 * with split roles (`ROLES=api` and `ROLES=worker,scheduler`) started as an operator would, with
 * REDIS_CLUSTER_NODES. Users created through the admin API land on every shard (so on every
 * master); their emits are delivered to a loopback receiver at least once each, and the requests to
 * their HTTP sources run (each shard's run stream, read by the worker's read group of that shard).
 * A timer source ticks once per interval while two scheduler processes run.
 */

const WORKFLOW = "p_cluster";
const EVENTS_PER_USER = 4;
/** The timer test's counting window, in seconds (one tick a second). */
const WINDOW_S = 8;

let cluster: LocalCluster;
let rx: CountingReceiver;
let api: DaemonChild;
let worker: DaemonChild;
const { prefix, adminToken } = clusterDeployment();
let users: E2eUser[] | undefined;
/** Users whose data is on every shard (so on every master), created once for the tests that need them. */
const everyShardUser = async (): Promise<E2eUser[]> => {
  users ??= await usersOnEveryShard(api, adminToken, prefix, cluster);
  return users;
};

beforeAll(async () => {
  cluster = await startCluster({ masters: 3 });
  rx = await startCountingReceiver();
  api = await startClusterDaemon("api", cluster, { roles: "api", prefix, adminToken });
  worker = await startClusterDaemon("worker", cluster, { roles: "worker,scheduler", prefix, adminToken });
}, 120_000);

afterAll(async () => {
  await killAll();
  await rx?.close();
  await cluster?.stop();
});

describe("two daemon processes with split roles on a 3-master Redis Cluster", () => {
  it("deliver every emit of users on every shard at least once", async () => {
    const users = await everyShardUser();
    // Every master holds some users' data.
    expect(new Set(users.map((u) => u.nodePort))).toEqual(new Set(cluster.masters.map((m) => m.port)));
    for (const u of users) await hookUp(u, rx.url(`/to/${u.id}`), WORKFLOW);

    const results = await Promise.all(
      users.flatMap((u) => Array.from({ length: EVENTS_PER_USER }, (_, n) => emit(api.url, u, WORKFLOW, n))),
    );
    const failed = results.filter((r) => r.status !== 202);
    expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
    // Each event is expected at its own user's webhook.
    const ids = results.map((r) => deliveryKey(`/to/${r.user}`, r.id as string));
    expect(new Set(ids).size).toBe(users.length * EVENTS_PER_USER);
    await allDelivered(ids, rx.byEvent, 60_000);
    expect(rx.requests.length).toBeGreaterThanOrEqual(ids.length);
    const dup = [...rx.byEvent.values()].filter((c) => c > 1).length;
    console.info(`[cluster e2e] ${users.length} users on 16 shards, ${ids.length} events delivered; ${dup} delivered more than once`);
    expect(api.hasExited() || worker.hasExited()).toBe(false);
  }, 180_000);

  it("runs every accepted request to the HTTP sources of users on every shard", async () => {
    const REQUESTS = 3;
    const sources = await Promise.all(
      (await everyShardUser()).map(async (u) => {
        const res = await u.api.post("/v1/sources", { json: { component_code: HTTP_ESM, name: "Inbox" } });
        expect(res.status, res.text).toBe(200);
        return { u, id: String(res.body.data.id), url: String(res.body.data.configured_props.http.endpoint_url) };
      }),
    );
    const answers = await Promise.all(
      sources.flatMap((s) =>
        Array.from({ length: REQUESTS }, (_, n) =>
          fetch(s.url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ n }) }).then(
            (r) => r.status,
          ),
        ),
      ),
    );
    expect(answers.filter((status) => status !== 200)).toEqual([]);
    const emitted = async (s: (typeof sources)[number]) => {
      const list = await s.u.api.get(`/v1/sources/${s.id}/event_summaries`, { query: { limit: 100, expand: "event" } });
      return new Set((list.body?.data ?? []).map((e: { event: { n: number } }) => e.event.n)).size;
    };
    await waitFor(async () => (await Promise.all(sources.map(emitted))).every((n) => n === REQUESTS), {
      timeoutMs: 60_000,
      intervalMs: 250,
      what: `${REQUESTS} runs of each of ${sources.length} sources`,
    });
    expect(api.hasExited() || worker.hasExited()).toBe(false);
  }, 120_000);

  it("ticks a timer once per interval with two scheduler processes", async () => {
    const second = await startClusterDaemon("worker-2", cluster, { roles: "worker,scheduler", prefix, adminToken });
    const u = (await everyShardUser())[0];
    if (!u) throw new Error("no user");
    const ticker = `module.exports = {
      key: "cluster-ticker",
      name: "Cluster Ticker",
      version: "0.0.1",
      props: { timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } } },
      async run(event) {
        this.$emit({ timestamp: event.timestamp }, { summary: "tick " + event.timestamp });
      },
    };`;
    const res = await u.api.post("/v1/sources", { json: { component_code: ticker, configured_props: { timer: { intervalSeconds: 1 } } } });
    expect(res.status, res.text).toBe(200);
    const sourceId = String(res.body.data.id);
    // biome-ignore lint/suspicious/noExplicitAny: event summaries are read field by field.
    const ticks = async (): Promise<any[]> => {
      const list = await client(api.url, u.apiKey).get(`/v1/sources/${sourceId}/event_summaries`, {
        query: { limit: 100, expand: "event" },
      });
      if (list.status !== 200) throw new Error(`${list.status} ${list.text}`);
      return [...list.body.data].reverse();
    };
    await waitFor(async () => (await ticks()).length >= 1, { timeoutMs: 60_000, intervalMs: 250, what: "a first tick" });
    // Ticks indexed over a window of WINDOW_S seconds: about one a second; two schedulers each
    // ticking would double it. The bound allows ticks delayed into the window by a loaded machine
    // (a tick's timestamp is when it ran, so late ticks may share a second: not a check).
    const from = Date.now();
    await waitFor(() => Date.now() >= from + WINDOW_S * 1000, { timeoutMs: WINDOW_S * 1000 + 5000, intervalMs: 200, what: "the window" });
    const inWindow = (await ticks()).filter((e) => e.indexed_at_ms > from && e.indexed_at_ms <= from + WINDOW_S * 1000);
    const when = JSON.stringify(inWindow.map((e) => e.indexed_at_ms - from));
    expect(inWindow.length, `ticks at ${when} ms`).toBeGreaterThanOrEqual(3);
    expect(inWindow.length, `ticks at ${when} ms`).toBeLessThanOrEqual(WINDOW_S + 3);
    expect(api.hasExited() || worker.hasExited() || second.hasExited()).toBe(false);
  }, 120_000);
});
