import { readdirSync, readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { testPrefix, redisUrl } from "../../helpers/redis.js";
import { type DaemonChild, killAll, spawnDaemon, waitForReady } from "../../helpers/process.js";
import { startReceiver } from "../../helpers/receiver.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * What a person sees of a daemon started from a terminal: the start's line with the address to
 * open and how to make a user, a line per request and per delivery at debug, a quiet Ctrl-C, and
 * one readable line per attempt at an unreachable Redis.
 */

afterEach(() => killAll());

interface Line {
  readonly level?: number;
  readonly msg?: string;
  readonly [k: string]: unknown;
}

/** The child's stdout lines that are JSON log lines, in order; `raw` every line of both streams. */
function output(d: DaemonChild): { lines: Line[]; raw: string[] } {
  const raw = d.logs().split("\n");
  const lines: Line[] = [];
  for (const l of raw) {
    const m = /^\[[^\]]* out\] (\{.*\})$/.exec(l);
    if (!m) continue;
    try {
      lines.push(JSON.parse(m[1] as string) as Line);
    } catch {
      // not a log line
    }
  }
  return { lines, raw };
}

async function daemonOn(env: Record<string, string> = {}, opts: { processGroup?: boolean } = {}) {
  const port = await freePort();
  const adminToken = `admin-${testPrefix()}`;
  const d = spawnDaemon(
    "daemon",
    { PORT: String(port), REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: testPrefix(), ADMIN_TOKEN: adminToken, ...env },
    opts,
  );
  await waitForReady(d, 60_000);
  return { d, port, adminToken };
}

/** The pids of the sandbox processes that are children of `pid` (Linux /proc). */
function sandboxChildren(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid && readFileSync(`/proc/${entry}/cmdline`, "utf8").includes("sandbox-host")) found.push(Number(entry));
    } catch {
      // ended meanwhile
    }
  }
  return found;
}

describe("logs for people", () => {
  it("says at info where to open the daemon and how to create a user", async () => {
    const { d, port } = await daemonOn();
    const start = output(d).lines.find((l) => typeof l.msg === "string" && l.msg.startsWith("tributary listening"));
    expect(start, d.logs()).toBeDefined();
    expect(start?.level).toBe(30);
    expect(start?.url).toBe(`http://127.0.0.1:${port}`);
    expect(start?.msg).toContain(`open http://127.0.0.1:${port}/`);
    expect(start?.msg).toContain(`curl -X POST http://127.0.0.1:${port}/admin/users`);
    // Info has no line per request.
    await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(output(d).lines.some((l) => l.msg === "GET /healthz 200")).toBe(false);
  }, 90_000);

  it("logs a line per request and per delivery outcome at debug", async () => {
    const rx = await startReceiver();
    try {
      const { d, port, adminToken } = await daemonOn({ LOG_LEVEL: "debug", ALLOW_PRIVATE_DESTINATIONS: "true" });
      const base = `http://127.0.0.1:${port}`;
      const json = (key: string, body: unknown) => ({
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const tag = testPrefix();
      const user = await fetch(`${base}/admin/users`, json(adminToken, { username: tag, email: `${tag}@example.com` }));
      const key = ((await user.json()) as { data: { api_key: string } }).data.api_key;
      const hook = (await (await fetch(`${base}/v1/webhooks`, json(key, { url: rx.url("/hook"), name: "h" }))).json()) as {
        data: { id: string };
      };
      const workflow = "p_logs1";
      expect((await fetch(`${base}/v1/subscriptions`, json(key, { emitter_id: workflow, listener_id: hook.data.id }))).status).toBe(200);
      expect((await fetch(`${base}/v1/workflows/${workflow}/events`, json(key, { event: { order: 42 } }))).status).toBe(202);
      await rx.waitFor((r) => r.to("/hook").length >= 1, { timeoutMs: 20_000 });
      const lines = await waitFor(
        () => {
          const all = output(d).lines;
          return all.some((l) => l.outcome === "delivered") && all;
        },
        { timeoutMs: 20_000, what: "the delivery's debug line" },
      );
      const request = lines.find((l) => l.msg === `POST /v1/workflows/${workflow}/events 202`);
      expect(request?.level, d.logs()).toBe(20);
      const delivery = lines.find((l) => l.outcome === "delivered");
      expect(delivery?.level).toBe(20);
      expect(delivery?.listenerId).toBe(hook.data.id);
      expect(delivery?.msg).toMatch(new RegExp(`^delivery \\S+ to ${hook.data.id}: delivered \\(HTTP 200\\)$`));
    } finally {
      await rx.close();
    }
  }, 90_000);

  it("stops on a terminal's Ctrl-C (SIGINT to the process group) without an error line", async () => {
    const { d } = await daemonOn({}, { processGroup: true });
    // The start's compiler check runs in a sandbox process: the child a Ctrl-C used to reach.
    await waitFor(() => sandboxChildren(d.pid).length > 0, { timeoutMs: 30_000, what: "a sandbox process" });
    process.kill(-d.pid, "SIGINT");
    const exit = await d.exited;
    expect(exit.code, d.logs()).toBe(0);
    const { lines } = output(d);
    expect(lines.some((l) => l.msg === "stopped")).toBe(true);
    expect(
      lines.filter((l) => (l.level ?? 0) >= 50),
      d.logs(),
    ).toEqual([]);
  }, 90_000);

  it("says in one line per attempt which Redis does not answer, with no stack", async () => {
    const port = await freePort(); // nothing listens there
    const d = spawnDaemon("daemon", { PORT: String(await freePort()), REDIS_URL: `redis://:secret-pw@127.0.0.1:${port}` });
    const warned = await waitFor(
      () => {
        const w = output(d).lines.filter((l) => l.level === 40);
        return w.length >= 2 && w;
      },
      { timeoutMs: 30_000, what: "two attempts' lines" },
    );
    for (const l of warned) expect(l.msg).toMatch(new RegExp(`^redis at 127\\.0\\.0\\.1:${port} is not answering \\(connect ECONNREFUSED`));
    const { raw } = output(d);
    expect(raw.filter((l) => /\[ioredis\]|^\[[^\]]*\]\s+at /.test(l))).toEqual([]);
    expect(raw.join("\n")).not.toContain("secret-pw");
  }, 60_000);
});
