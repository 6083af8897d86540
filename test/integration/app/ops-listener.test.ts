import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkReadiness } from "../../../src/cli/healthcheck.js";
import { runCli } from "../../../src/cli/run.js";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * OPS_PORT: a process without the api role serves /healthz, /readyz and /metrics on a listener of
 * its own, which is what a split deployment's probes, `tributary healthcheck` and Prometheus reach.
 */

let worker: TestDaemon;
let base: string;

beforeAll(async () => {
  worker = await startTestDaemon({ ROLES: "worker", OPS_PORT: "0" });
  const port = worker.daemon.opsPort;
  if (port === undefined) throw new Error("no ops listener");
  base = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  await worker?.close();
});

async function healthcheckExit(env: NodeJS.ProcessEnv): Promise<number> {
  return runCli(["healthcheck"], env, { stdout: () => {}, stderr: () => {} });
}

describe("the ops listener of a worker-only process", () => {
  it("answers /healthz and, once the roles run, /readyz", async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await waitFor(async () => ((await fetch(`${base}/readyz`)).status === 200 ? true : undefined), {
      timeoutMs: 20_000,
      what: "/readyz 200 on the ops port",
    });
    expect(ready).toBe(true);
  });

  it("serves the process's metrics, the workers' queue samples among them", async () => {
    const text = await waitFor(
      async () => {
        const res = await fetch(`${base}/metrics`);
        const body = await res.text();
        return res.status === 200 && body.includes('tributary_queue_depth{queue="delivery"') ? body : undefined;
      },
      { timeoutMs: 20_000, what: "queue samples on /metrics" },
    );
    expect(text).toContain("# TYPE tributary_deliveries_total counter");
    expect(text).toMatch(/^tributary_ready 1$/m);
    expect(text).toContain("process_cpu_user_seconds_total");
  });

  it("serves nothing else: 404 for other paths, 405 for other methods", async () => {
    const other = await fetch(`${base}/v1/users/me`);
    expect(other.status).toBe(404);
    expect(await other.json()).toMatchObject({ code: "route_not_found" });
    const post = await fetch(`${base}/readyz`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("HEAD, GET");
  });

  it("is what `tributary healthcheck` probes by default when OPS_PORT is set", async () => {
    const port = String(worker.daemon.opsPort);
    expect(await healthcheckExit({ HOST: "127.0.0.1", PORT: "1", OPS_PORT: port })).toBe(0);
  });
});

describe("without OPS_PORT", () => {
  it("a process opens no ops listener", async () => {
    const scheduler = await startTestDaemon({ ROLES: "scheduler" });
    try {
      expect(scheduler.daemon.opsPort).toBeUndefined();
      expect(scheduler.daemon.server).toBeUndefined();
    } finally {
      await scheduler.close();
    }
  });
});

describe("shutdown", () => {
  it("closes the ops listener", async () => {
    const d = await startTestDaemon({ ROLES: "scheduler", OPS_PORT: "0" });
    const port = String(d.daemon.opsPort);
    await waitFor(async () => (await healthcheckExit({ HOST: "127.0.0.1", OPS_PORT: port })) === 0, {
      timeoutMs: 20_000,
      what: "the scheduler's ops listener ready",
    });
    await d.close();
    // Refused, not merely unready (a closed daemon's readiness is false too).
    const after = await checkReadiness(`http://127.0.0.1:${port}`);
    expect(after.ok ? "ready" : after.reason).toMatch(/connection refused/);
  });
});
