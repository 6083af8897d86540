/**
 * Bytes allocated per single emit, by allocation site, for the Koa + EVALSHA baseline and the
 * daemon's API process (and, with ALLOC_ROOT, another checkout's daemon): V8's sampling heap
 * profiler, driven over each process's inspector (`HeapProfiler.startSampling` with the objects
 * that young- and old-generation collections took included, so the profile counts what was
 * allocated, not what survived). A byte count, not a time: a busy host slows the load but does not
 * change what an emit allocates, so an A/B of a change's garbage is readable on a shared host where
 * its CPU effect is not (docs/performance.md "Allocations per emit").
 *
 *   npx tsx bench/allocations.ts                       # baseline and this checkout
 *   ALLOC_ROOT=/tmp/base npx tsx bench/allocations.ts  # and another checkout (built here first)
 *
 * Knobs: ALLOC_WARMUP_S (4), ALLOC_LOAD_S (4), ALLOC_TOP (25 sites per arm), ALLOC_INTERVAL (1024:
 * the profiler's mean sampling interval in bytes), BENCH_CONNECTIONS (8). Each arm is warmed up
 * and profiled in turn, each daemon on a Redis of its own, `ROLES=api`.
 */
import { randomBytes } from "node:crypto";
import { WebSocket } from "undici";
import { freePort, startEmbeddedRedis } from "../src/redis/embedded.js";
import { startBaseline } from "./baselines.js";
import { ROOT } from "./child.js";
import { buildDaemon, startEmitDaemon } from "./daemon-process.js";
import { hammer, smallEvent } from "./load.js";
import { RUNTIME_DAEMON_ENV } from "./runtime.js";
import { envInt } from "./stats.js";

const WARMUP_S = envInt("ALLOC_WARMUP_S", 4);
const LOAD_S = envInt("ALLOC_LOAD_S", 4);
const TOP = envInt("ALLOC_TOP", 25);
const INTERVAL = envInt("ALLOC_INTERVAL", 1024);
const CONNECTIONS = envInt("BENCH_CONNECTIONS", 8);
const OTHER_ROOT = process.env.ALLOC_ROOT;

/** One DevTools-protocol session with the process whose inspector listens on `port`. */
async function inspect(port: number) {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { webSocketDebuggerUrl: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target on port ${port}`);
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve, { once: true });
    ws.addEventListener("error", reject, { once: true });
  });
  let next = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  ws.addEventListener("message", (e) => {
    const msg = JSON.parse(String(e.data)) as { id?: number; result?: unknown };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg.result);
  });
  return {
    send(method: string, params: object = {}): Promise<unknown> {
      const id = ++next;
      return new Promise((resolve) => {
        waiting.set(id, resolve);
        ws.send(JSON.stringify({ id, method, params }));
      });
    },
    close: () => ws.close(),
  };
}

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

/**
 * Bytes per request by allocation site (function, file:line), largest first, and the total. A
 * site in a builtin or the V8 API (no file: `Map`, `push`, `exec`) is named with the nearest
 * caller that has one (`Map :0 < flush dist/src/store/record-groups.js:86`).
 */
function bySite(head: ProfileNode, requests: number): { total: number; sites: [string, number][] } {
  const sums = new Map<string, number>();
  const stack: [ProfileNode, string][] = [[head, ""]];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [node, caller] = item;
    const { functionName, url, lineNumber } = node.callFrame;
    const file = url.replace(/^.*node_modules\//, "").replace(`file://${ROOT}/`, "");
    const own = `${functionName || "(anonymous)"} ${file}:${lineNumber + 1}`;
    const site = url === "" && caller !== "" ? `${own} < ${caller}` : own;
    sums.set(site, (sums.get(site) ?? 0) + node.selfSize);
    for (const child of node.children) stack.push([child, url === "" ? caller : own]);
  }
  const sites = [...sums.entries()].map(([site, bytes]): [string, number] => [site, bytes / requests]).sort((a, b) => b[1] - a[1]);
  return { total: sites.reduce((a, [, b]) => a + b, 0), sites };
}

async function main(): Promise<void> {
  const log = (msg: string) => process.stderr.write(`[alloc] ${msg}\n`);
  buildDaemon(ROOT);
  if (OTHER_ROOT) buildDaemon(OTHER_ROOT);
  const stops: (() => Promise<unknown>)[] = [];
  try {
    const adminToken = `alloc-admin-${randomBytes(8).toString("hex")}`;
    const arms: { name: string; url: string; headers: Record<string, string>; port: number }[] = [];
    const baseRedis = await startEmbeddedRedis();
    stops.unshift(() => baseRedis.close());
    const basePort = await freePort();
    const { child, url } = await startBaseline(
      "koa-evalsha",
      { REDIS_URL: baseRedis.url },
      { name: "koa-evalsha", nodeArgs: [`--inspect=127.0.0.1:${basePort}`] },
    );
    stops.unshift(() => child.stop());
    arms.push({ name: "Koa + EVALSHA", url, headers: { authorization: "Bearer x" }, port: basePort });
    for (const [name, root] of [["this", ROOT], ...(OTHER_ROOT ? [["other", OTHER_ROOT]] : [])] as [string, string][]) {
      const port = await freePort();
      const e = await startEmitDaemon(
        { adminToken, env: RUNTIME_DAEMON_ENV, root, roles: "api", flags: [`--inspect=127.0.0.1:${port}`] },
        `daemon(${name})`,
        "alloc",
      );
      stops.unshift(() => e.stop());
      arms.push({
        name: `daemon (${name})`,
        url: `${e.daemon.url}/v1/workflows/p_alloc/events`,
        headers: { authorization: `Bearer ${e.key}` },
        port,
      });
    }
    const body = JSON.stringify({ event: smallEvent(1) });
    const out: string[] = [];
    for (const arm of arms) {
      await hammer({ url: arm.url, body, headers: arm.headers, durationS: WARMUP_S, connections: CONNECTIONS });
      const session = await inspect(arm.port);
      try {
        await session.send("HeapProfiler.startSampling", {
          samplingInterval: INTERVAL,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: true,
        });
        const r = await hammer({ url: arm.url, body, headers: arm.headers, durationS: LOAD_S, connections: CONNECTIONS });
        const { profile } = (await session.send("HeapProfiler.stopSampling")) as { profile: { head: ProfileNode } };
        if (r.bad > 0) throw new Error(`${arm.name}: ${r.bad} failed requests`);
        const { total, sites } = bySite(profile.head, r.ok);
        log(`${arm.name}: ${(total / 1024).toFixed(1)} KB per request`);
        out.push(`## ${arm.name}: ${(total / 1024).toFixed(1)} KB allocated per emit (${r.ok} emits)`, "");
        out.push("| bytes per emit | site |", "|---|---|");
        for (const [site, bytes] of sites.slice(0, TOP)) out.push(`| ${bytes.toFixed(0)} | \`${site}\` |`);
        out.push("");
      } finally {
        session.close();
      }
    }
    process.stdout.write(`${out.join("\n")}\n`);
  } finally {
    for (const s of stops) await s().catch(() => undefined);
  }
}

await main();
process.exit(0);
