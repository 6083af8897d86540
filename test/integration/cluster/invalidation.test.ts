import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../../src/cli/run.js";
import { createKeys } from "../../../src/store/keys.js";
import { type ClusterNode, type LocalCluster, startCluster } from "../../helpers/cluster.js";
import { clusterDeployment, startClusterDaemon } from "../../helpers/cluster-daemon.js";
import { createUser } from "../../helpers/cluster-e2e.js";
import { client } from "../../helpers/daemon.js";
import { type DaemonChild, killAll } from "../../helpers/process.js";
import { onRedisNode } from "../../helpers/redis-node.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * API-key revocation on a Redis Cluster across processes (SPEC §4, issue 13; design 4.7 and its
 * "variants" of the failover test): a `ROLES=api` process caches API keys and drops them on
 * messages of its invalidation subscriber, a connection to one node of the cluster. That node is
 * SIGKILLed (the cluster fails it over when it is a master), then the key is rotated from another
 * process (the CLI, which subscribes to nothing). The api process refuses the old key and accepts
 * the new one well within the cache's 60 s safety-net age: a subscription lost without notice (an
 * ioredis Cluster subscriber moving to another node silently) would keep the old key for up to that.
 */

/** Well under the caches' 60 s maximum age, so the refusal is the feed's work, not the age's. */
const REFUSAL_BOUND_MS = 20_000;

let cluster: LocalCluster;
let api: DaemonChild;
const { prefix, adminToken } = clusterDeployment();

beforeAll(async () => {
  cluster = await startCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000 });
  api = await startClusterDaemon("api", cluster, { roles: "api", prefix, adminToken });
}, 120_000);

afterAll(async () => {
  await killAll();
  await cluster?.stop();
});

/** The live nodes on which someone subscribes to `channel` (classic pub/sub: PUBSUB CHANNELS is per node). */
async function nodesSubscribedTo(channel: string): Promise<ClusterNode[]> {
  const out: ClusterNode[] = [];
  for (const node of cluster.nodes) {
    if (node.exited()) continue;
    const channels = await onRedisNode(node.port, async (r) => (await r.call("PUBSUB", "CHANNELS", channel)) as string[]).catch(() => []);
    if (channels.length > 0) out.push(node);
  }
  return out;
}

describe("an API key rotated after the node of the api process's revocation subscriber died", () => {
  it("is refused with its old value and accepted with the new one", async () => {
    const u = await createUser(api, adminToken, prefix, cluster);
    const call = (key: string) => client(api.url, key).get("/v1/webhooks");
    // The api process has the key cached.
    expect((await call(u.apiKey)).status).toBe(200);

    const channel = createKeys(prefix).apiKeyRevocations();
    const [victim] = await waitFor(
      async () => {
        const s = await nodesSubscribedTo(channel);
        return s.length === 1 ? s : undefined;
      },
      { timeoutMs: 30_000, what: `one node with a subscriber of ${channel}` },
    );
    if (!victim) throw new Error("no subscriber node");
    const env = { REDIS_CLUSTER_NODES: cluster.seedList, REDIS_KEY_PREFIX: prefix, LOG_LEVEL: "silent" };
    const rotate = () =>
      waitFor(
        async () => {
          let out = "";
          const code = await runCli(["users", "rotate-key", u.id], env, { stdout: (t) => (out += t), stderr: () => {} });
          return code === 0 ? String(JSON.parse(out).api_key) : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 250, what: "the key rotation through the CLI" },
      );
    /** The old key refused and the new one accepted, each within the bound; the refusal's delay. */
    const refusedThenAccepted = async (old: string, fresh: string): Promise<number> => {
      const at = Date.now();
      await waitFor(async () => (await call(old)).status === 401, {
        timeoutMs: REFUSAL_BOUND_MS,
        intervalMs: 100,
        what: "the api process to refuse the old key",
      });
      const ms = Date.now() - at;
      await waitFor(async () => (await call(fresh)).status === 200, {
        timeoutMs: REFUSAL_BOUND_MS,
        what: "the api process to accept the new key",
      });
      return ms;
    };

    // The node dies; the key is rotated at once (while the subscriber moves, or as soon as the
    // cluster has failed over when the killed master held the key's slot).
    await cluster.kill(victim);
    const first = await rotate();
    const firstMs = await refusedThenAccepted(u.apiKey, first);

    // Once the subscriber is on another node, a rotation reaches the process through it.
    if (victim.role === "master") await cluster.waitForFailover(victim, 60_000);
    await waitFor(async () => (await nodesSubscribedTo(channel)).length === 1, {
      timeoutMs: 30_000,
      what: "the subscriber on another node",
    });
    expect((await call(first)).status).toBe(200); // cached again
    const second = await rotate();
    const secondMs = await refusedThenAccepted(first, second);
    console.info(
      `[cluster invalidation] subscriber node ${victim.port} (${victim.role}) killed; old key refused ${firstMs} ms after the ` +
        `rotation right after the kill, ${secondMs} ms after a rotation once resubscribed`,
    );
    expect(api.hasExited()).toBe(false);
  }, 180_000);
});
