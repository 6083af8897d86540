import { connect, type Socket } from "node:net";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { connectRedis, redisUrl } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/receiver.js";
import { createSource, expectStatus, type Json } from "./support.js";

/**
 * Compiled code is kept in the daemon by component and code hash (issue 12 item 2,
 * runtime/compiled-code.ts): the runs of a source read its bundle from Redis once, not per run,
 * and a redeploy (new code, so a new component and hash) reads and runs the new bundle. Counted
 * with Redis MONITOR on the daemon's private key prefix: every GET of a `…:component:<id>:compiled`
 * key the daemon sends. Real daemon, real Redis, real sandbox processes.
 */

let td: TestDaemon;
let anon: Client;
let monitor: Socket;
let probe: Redis;
/** Every command the monitor saw under the daemon's prefix, as its arguments. */
const seen: string[][] = [];

beforeAll(async () => {
  td = await startTestDaemon();
  anon = client(td.url);
  probe = connectRedis();
  monitor = await startMonitor((args) => {
    if (args.some((a) => a.startsWith(`${td.prefix}:`))) seen.push(args);
  });
});

afterAll(async () => {
  monitor?.destroy();
  probe?.disconnect();
  await td?.close();
});

/**
 * MONITOR on a plain socket (ioredis's monitor mode mis-parses some monitored lines): each line
 * is `+<time> [<db> <client>] "cmd" "arg" ...`, the arguments quoted with backslash escapes.
 */
async function startMonitor(onCommand: (args: string[]) => void): Promise<Socket> {
  const url = new URL(redisUrl());
  const socket = connect(Number(url.port || 6379), url.hostname);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  let buffered = "";
  let monitoring = false;
  socket.setEncoding("utf8");
  socket.on("data", (chunk: string) => {
    buffered += chunk;
    if (!monitoring) return;
    let end = buffered.indexOf("\r\n");
    while (end !== -1) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf("\r\n");
      const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => (m[1] ?? "").replace(/\\(.)/g, "$1"));
      if (args.length > 0) onCommand(args);
    }
  });
  // The answers to AUTH (when the URL has a password) and MONITOR: each must be +OK.
  const answers = url.password ? 2 : 1;
  const ready = new Promise<void>((resolve, reject) => {
    const check = () => {
      const lines = buffered.split("\r\n");
      if (lines.length <= answers) return;
      socket.off("data", check);
      const bad = lines.slice(0, answers).find((l) => l !== "+OK");
      if (bad === undefined) {
        monitoring = true;
        buffered = lines.slice(answers).join("\r\n");
        resolve();
      } else reject(new Error(`MONITOR refused: ${bad}`));
    };
    socket.on("data", check);
  });
  const auth = url.password ? `AUTH ${decodeURIComponent(url.username || "default")} ${decodeURIComponent(url.password)}\r\n` : "";
  socket.write(`${auth}MONITOR\r\n`);
  await ready;
  return socket;
}

let marks = 0;
/** Waits until the monitor has seen everything Redis ran before now (a marker command after it). */
async function drained(): Promise<void> {
  const mark = `${td.prefix}:monitor-mark:${++marks}`;
  await probe.get(mark);
  await waitFor(() => seen.some((args) => args[1] === mark), { what: `the monitor to see ${mark}` });
}

/** GETs of a component's compiled bundle seen so far. */
function bundleReads(componentId: string): number {
  const key = new RegExp(`:component:${componentId}:compiled$`);
  return seen.filter((args) => args[0]?.toLowerCase() === "get" && key.test(args[1] ?? "")).length;
}

const version = (v: string) => `module.exports = {
  name: "Compiled cache",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) { this.http.respond({ status: 200, body: { v: ${JSON.stringify(v)} } }); },
};`;

async function call(s: Json): Promise<unknown> {
  const res = await anon.post(String(s.configured_props.http.endpoint_url), { json: {} });
  expectStatus(res, 200);
  return res.body;
}

describe("compiled code cache", () => {
  it("reads a source's bundle from Redis for its first run only, and a redeploy's new bundle once", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, version("one"));
    const first = String(s.component_id);

    expect(await call(s)).toEqual({ v: "one" });
    await drained();
    const afterFirst = bundleReads(first);
    expect(afterFirst).toBe(1);

    // Later runs of the same code: no read of the bundle at all.
    for (let i = 0; i < 3; i++) expect(await call(s)).toEqual({ v: "one" });
    await drained();
    expect(bundleReads(first)).toBe(afterFirst);

    // A redeploy: a new component (new code hash), whose bundle is read once and runs.
    const put = await u.api.put(`/v1/sources/${s.id}`, { json: { component_code: version("two") } });
    expectStatus(put, 200);
    const second = String(put.body.data.component_id);
    expect(second).not.toBe(first);
    expect(await call(s)).toEqual({ v: "two" });
    expect(await call(s)).toEqual({ v: "two" });
    await drained();
    expect(bundleReads(second)).toBe(1);
    expect(bundleReads(first)).toBe(afterFirst);
  });
});
