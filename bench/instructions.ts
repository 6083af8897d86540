/**
 * Machine instructions per single emit, counted by valgrind's callgrind, for the Koa + EVALSHA
 * baseline (bench/baseline-child.ts) and the daemon (and, with INSTR_ROOT, another checkout's
 * daemon): the ingest row's comparison without the host's noise. Callgrind counts what a process
 * executes, not how long it took, so another process on the machine does not change the count
 * (docs/performance.md "Instructions per emit"). Each arm runs under valgrind (about fifty times
 * slower), takes INSTR_WARMUP emits, has its counters zeroed (`callgrind_control -z`), takes
 * INSTR_REQUESTS more at the bench's 8 connections, and has its counts dumped
 * (`callgrind_control -d`), then counts an idle window as long as the loaded one and subtracts
 * it. Only the node process is counted: not its Redis, not the kernel's network stack, not the
 * sandbox child. The daemon runs the api role alone (the ingest path; fan-out of an emit nobody
 * subscribes to is no work, and the worker role's clock-paced polling would only add idle work).
 *
 *   npx tsx bench/instructions.ts                      # baseline and this checkout
 *   INSTR_ROOT=/tmp/base npx tsx bench/instructions.ts # and another checkout (built here first)
 *
 * Knobs: INSTR_WARMUP (8000), INSTR_REQUESTS (4000), BENCH_CONNECTIONS (8). Needs valgrind
 * (callgrind and callgrind_control); a few minutes per arm.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import autocannon from "autocannon";
import { startEmbeddedRedis } from "../src/redis/embedded.js";
import { startBaseline } from "./baselines.js";
import type { NodeChild } from "./child.js";
import { buildDaemon, createPaidUser, startDaemonProcess } from "./daemon-process.js";
import { smallEvent } from "./load.js";
import { RUNTIME_DAEMON_ENV } from "./runtime.js";
import { envInt } from "./stats.js";

const WARMUP = envInt("INSTR_WARMUP", 8000);
const REQUESTS = envInt("INSTR_REQUESTS", 4000);
const CONNECTIONS = envInt("BENCH_CONNECTIONS", 8);
const OTHER_ROOT = process.env.INSTR_ROOT;
/** Under valgrind a start-up takes minutes. */
const START_TIMEOUT_MS = 600_000;

const fmt = (n: number) => Math.round(n).toLocaleString("en");
const pct = (x: number) => `${(100 * x).toFixed(1)} %`;

const outDir = mkdtempSync(path.join(tmpdir(), "instr-"));
const wrapper = (name: string) => ["valgrind", "--tool=callgrind", `--callgrind-out-file=${path.join(outDir, `${name}.%p`)}`];

/** Sends exactly `amount` single emits at CONNECTIONS connections; throws unless all got a 2xx. */
async function emits(url: string, headers: Record<string, string>, amount: number): Promise<void> {
  const r = await autocannon({
    url,
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ event: smallEvent(1) }),
    connections: CONNECTIONS,
    amount,
    timeout: 60,
  });
  if (r["2xx"] !== amount) throw new Error(`${url}: ${r["2xx"]} of ${amount} emits answered 2xx (${r.non2xx} other, ${r.errors} errors)`);
}

/**
 * Instructions the process executed between `callgrind_control -z` and `-d` (its dump's summary).
 * vgdb finds a process by a name that ends in the process's HOST variable (`-on-<HOST>`): the
 * daemon's HOST is its bind address, so `host` is passed to callgrind_control as the child has it.
 */
async function counted(child: NodeChild, name: string, host: string | undefined, run: () => Promise<void>): Promise<number> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (host === undefined) delete env.HOST;
  else env.HOST = host;
  const control = (flag: string) => execFileSync("callgrind_control", [flag, String(child.pid)], { encoding: "utf8", env });
  const before = new Set(readdirSync(outDir));
  const zeroed = control("-z");
  await run();
  const dumped = control("-d");
  const dump = readdirSync(outDir).find((f) => f.startsWith(`${name}.${child.pid}.`) && !before.has(f));
  if (!dump) throw new Error(`${name}: no callgrind dump in ${outDir} (${readdirSync(outDir).join(", ")}): ${zeroed} ${dumped}`);
  const m = /^summary: (\d+)$/m.exec(readFileSync(path.join(outDir, dump), "utf8"));
  if (!m) throw new Error(`${name}: no summary line in ${dump}`);
  return Number(m[1]);
}

/**
 * Instructions per emit of `REQUESTS` emits, less what the process runs when idle for as long
 * (its timers: under valgrind an emit takes about fifty times longer, so work paced by the clock
 * would otherwise weigh fifty times more per emit than it does natively).
 */
async function perEmit(child: NodeChild, name: string, host: string | undefined, load: () => Promise<void>) {
  const started = Date.now();
  const busy = await counted(child, name, host, load);
  const ms = Date.now() - started;
  const idle = await counted(child, name, host, () => new Promise((r) => setTimeout(r, ms)));
  return { raw: busy / REQUESTS, net: (busy - idle) / REQUESTS, idleShare: idle / busy };
}

interface Arm {
  readonly name: string;
  /** Instructions per emit, idle work subtracted. */
  readonly net: number;
  readonly raw: number;
  /** The idle window's count ÷ the loaded window's. */
  readonly idleShare: number;
}

async function baselineArm(redisUrl: string): Promise<Arm> {
  const name = "koa-evalsha";
  const { child, url } = await startBaseline(
    "koa-evalsha",
    { REDIS_URL: redisUrl },
    { name, wrapper: wrapper(name), startTimeoutMs: START_TIMEOUT_MS },
  );
  try {
    await emits(url, {}, WARMUP);
    return { name: "Koa + EVALSHA", ...(await perEmit(child, name, undefined, () => emits(url, {}, REQUESTS))) };
  } finally {
    await child.stop(5000);
  }
}

async function daemonArm(redisUrl: string, label: string, root: string | undefined, name: string): Promise<Arm> {
  const adminToken = "instr-admin-token-0123456789abcdef";
  const daemon = await startDaemonProcess(
    { redisUrl, adminToken, root, roles: "api", env: RUNTIME_DAEMON_ENV, wrapper: wrapper(name), startTimeoutMs: START_TIMEOUT_MS },
    name,
  );
  try {
    const key = await createPaidUser(daemon.url, adminToken, `instr_${name.replace(/\W/g, "_")}_${Date.now()}`);
    const url = `${daemon.url}/v1/workflows/p_instr/events`;
    const headers = { authorization: `Bearer ${key}` };
    await emits(url, headers, WARMUP);
    return { name: label, ...(await perEmit(daemon.child, name, "127.0.0.1", () => emits(url, headers, REQUESTS))) };
  } finally {
    await daemon.stop();
  }
}

async function main(): Promise<void> {
  execFileSync("valgrind", ["--version"], { stdio: "ignore" });
  buildDaemon();
  if (OTHER_ROOT) buildDaemon(OTHER_ROOT);
  const arms: Arm[] = [];
  // Each arm on a Redis of its own, one after the other (the counts do not depend on the order).
  const run = async (make: (redisUrl: string) => Promise<Arm>) => {
    const redis = await startEmbeddedRedis();
    try {
      const arm = await make(redis.url);
      console.log(`[instr] ${arm.name}: ${fmt(arm.net)} instructions per emit (${fmt(arm.raw)} before the idle ${pct(arm.idleShare)})`);
      arms.push(arm);
    } finally {
      await redis.close();
    }
  };
  await run(baselineArm);
  await run((url) => daemonArm(url, "daemon (this)", undefined, "daemon-this"));
  if (OTHER_ROOT) await run((url) => daemonArm(url, "daemon (other)", OTHER_ROOT, "daemon-other"));
  const base = arms[0];
  console.log("| arm | instructions per emit (idle subtracted) | baseline ÷ arm | with idle work | idle ÷ loaded window |");
  console.log("|---|---|---|---|---|");
  for (const a of arms) {
    const ratio = base ? (base.net / a.net).toFixed(2) : "n/a";
    console.log(`| ${a.name} | ${fmt(a.net)} | ${ratio}× | ${fmt(a.raw)} | ${pct(a.idleShare)} |`);
  }
  console.log(`(${WARMUP} emits of warm-up, ${REQUESTS} counted, ${CONNECTIONS} connections; callgrind dumps in ${outDir})`);
}

main()
  .then(() => process.exit(0))
  .catch((err) => {
    console.error(err);
    process.exit(1);
  });
