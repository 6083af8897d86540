import { writeFileSync } from "node:fs";
import { startCluster } from "./cluster.js";
import { startSentinelGroup } from "./sentinel.js";
import { clusterDeployment, startClusterDaemon } from "./cluster-daemon.js";
import { killAll } from "./process.js";

/**
 * A whole Tributary deployment on a local Redis Cluster, for running the conformance suite against
 * it by hand (docs/decisions.md "Cluster tests"):
 *
 *   node --no-node-snapshot --import tsx test/helpers/cluster-stack.ts [ENV_FILE] &
 *   . ENV_FILE && BASE_URL=$BASE_URL ADMIN_TOKEN=$ADMIN_TOKEN /work/shared/conformance/run.sh .
 *
 * Starts 3 masters (CLUSTER_REPLICAS replicas each, default 0) — or, with STACK=sentinel, a master,
 * a replica and 3 sentinels (REDIS_SENTINELS) — then one `ROLES=api` process and one
 * `ROLES=worker,scheduler` process with the conformance suite's settings, writes `BASE_URL=...` and
 * `ADMIN_TOKEN=...` to ENV_FILE (default ./cluster-stack.env) once both are ready, and runs until
 * SIGTERM/SIGINT, when it stops everything it started.
 */

const envFile = process.argv[2] ?? "cluster-stack.env";
const sentinel = process.env.STACK === "sentinel";
const group = sentinel ? await startSentinelGroup({ replicas: 1 }) : undefined;
const cluster = group ? undefined : await startCluster({ masters: 3, replicas: Number(process.env.CLUSTER_REPLICAS ?? 0) });
const redis = group ? group.env() : cluster!;
const { prefix, adminToken } = clusterDeployment();
const env = {
  DELIVERY_RETRY_SCHEDULE: "200ms,400ms,800ms",
  DELIVERY_TIMEOUT_MS: "2000",
  TIMER_MIN_INTERVAL_SECONDS: "1",
};
let stopping = false;
const stopAll = async () => {
  stopping = true;
  await killAll();
  await cluster?.stop();
  await group?.stop();
  process.exit(0);
};
process.once("SIGTERM", () => void stopAll());
process.once("SIGINT", () => void stopAll());
try {
  const api = await startClusterDaemon("api", redis, { roles: "api", prefix, adminToken, env });
  const worker = await startClusterDaemon("worker", redis, { roles: "worker,scheduler", prefix, adminToken, env });
  writeFileSync(envFile, `BASE_URL=${api.url}\nADMIN_TOKEN=${adminToken}\n`);
  console.info(
    `${group ? `sentinels ${group.sentinelList}` : `cluster ${cluster?.seedList}`}; api ${api.url} (pid ${api.pid}); worker ${worker.url} (pid ${worker.pid}); env in ${envFile}`,
  );
  const exited = await Promise.race([api.exited.then(() => api), worker.exited.then(() => worker)]);
  if (!stopping) console.error(`${exited.name} exited:\n${exited.logs()}`);
  await stopAll();
} catch (err) {
  console.error(err);
  await stopAll();
}
