import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freePort, redisAnswersPing } from "../../../src/redis/embedded.js";
import { killAll, spawnDaemon } from "../../helpers/process.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * Start-up of the daemon as an operator runs it, for the Redis shapes of SPEC §8 it refuses: more
 * than one shape, Sentinel without its group name, and a REDIS_URL that points at a Cluster node
 * (REDIS_CLUSTER_NODES is the way to a Cluster). Each exits 1 with one line on stderr that says why.
 * A daemon on REDIS_CLUSTER_NODES is tested in test/integration/durability/cluster-connections.test.ts.
 */

afterAll(async () => {
  await killAll();
});

async function refusal(env: Record<string, string>): Promise<{ code: number | null; stderr: string[] }> {
  const d = spawnDaemon("daemon", { PORT: String(await freePort()), HOST: "127.0.0.1", LOG_LEVEL: "error", ...env });
  const exit = await Promise.race([d.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000))]);
  if (!exit) await d.kill();
  const stderr = d
    .logs()
    .split("\n")
    .filter((l) => l.startsWith("[daemon err] "))
    .map((l) => l.slice("[daemon err] ".length));
  return { code: exit?.code ?? null, stderr };
}

describe("start-up with a Redis shape it refuses", () => {
  it("exits 1 naming the variables when more than one shape is set", async () => {
    const r = await refusal({ REDIS_URL: "redis://127.0.0.1:1", REDIS_SENTINELS: "127.0.0.1:2", REDIS_SENTINEL_NAME: "m" });
    expect(r.code).toBe(1);
    expect(r.stderr).toEqual([expect.stringMatching(/^tributary: conflicting Redis settings: REDIS_URL and REDIS_SENTINELS are both set/)]);
  }, 90_000);

  it("exits 1 when REDIS_SENTINELS comes without REDIS_SENTINEL_NAME", async () => {
    const r = await refusal({ REDIS_SENTINELS: "127.0.0.1:2" });
    expect(r.code).toBe(1);
    expect(r.stderr).toEqual([expect.stringMatching(/^tributary: invalid REDIS_SENTINELS: needs REDIS_SENTINEL_NAME/)]);
  }, 90_000);

  it("exits 1 naming the variables when REDIS_URL and REDIS_CLUSTER_NODES are both set", async () => {
    const r = await refusal({ REDIS_URL: "redis://127.0.0.1:1", REDIS_CLUSTER_NODES: "127.0.0.1:7000,127.0.0.1:7001" });
    expect(r.code).toBe(1);
    expect(r.stderr).toEqual([
      expect.stringMatching(/^tributary: conflicting Redis settings: REDIS_URL and REDIS_CLUSTER_NODES are both set/),
    ]);
  }, 90_000);

  it("exits 1 when REDIS_URL points at a Redis Cluster node", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "tributary-cluster-node-"));
    const port = await freePort();
    const server = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--cluster-enabled", "yes", "--dir", dir],
      { stdio: "ignore" },
    );
    try {
      await waitFor(() => redisAnswersPing(port), { timeoutMs: 15_000, what: "a cluster-enabled redis-server" });
      const r = await refusal({ REDIS_URL: `redis://127.0.0.1:${port}` });
      expect(r.code).toBe(1);
      expect(r.stderr).toEqual([
        expect.stringMatching(/^tributary: the Redis server at REDIS_URL is a Redis Cluster node .*set REDIS_CLUSTER_NODES/),
      ]);
    } finally {
      server.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
