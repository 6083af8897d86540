import { afterAll, describe, expect, it } from "vitest";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";
import type { HostFetch, HostFetchInit, HostFetchResponse, HttpResponse, RunRequest } from "../../../../src/runtime/sandbox/types.js";

// Real isolated-vm: component code compiled by esbuild and run in isolates.

const allowedPackages = ["@pipedream/platform", "ms"];
const fetched: { url: string; init: HostFetchInit }[] = [];
const fakeFetch: HostFetch = async (url, init): Promise<HostFetchResponse> => {
  fetched.push({ url, init });
  if (url.includes("fail")) throw new Error("connection refused");
  if (url.includes("404")) return { status: 404, headers: { "content-type": "application/json" }, body: '{"error":"nope"}' };
  return {
    status: 200,
    statusText: "OK",
    headers: { "content-type": "application/json", "x-a": "1" },
    body: JSON.stringify({ echo: url }),
  };
};
const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: 2000 }, { fetch: fakeFetch });
afterAll(() => sandbox.close());

async function run(code: string, req: Partial<RunRequest> = {}) {
  const compiledCode = await compileComponent(code, { allowedPackages });
  return sandbox.run({ compiledCode, sourceId: "dc_test", method: "run", props: {}, db: {}, ...req });
}

describe("Sandbox.run", () => {
  it("runs a CommonJS component with props, db and $emit", async () => {
    const code = `module.exports = {
      name: "Timer", props: { db: "$.service.db", timer: { type: "$.interface.timer" }, greeting: "string" },
      async run(event) {
        const n = (this.db.get("n") || 0) + 1;
        this.db.set("n", n);
        this.$emit({ greeting: this.greeting, n, interval: event.interval_seconds, every: this.timer.interval_seconds }, { id: String(n), summary: "tick " + n, ts: 1700000000000 });
      },
    };`;
    let db: Record<string, unknown> = {};
    const ns: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await run(code, {
        props: { greeting: "yo", timer: { cron: null, interval_seconds: 60 } },
        db,
        event: { timestamp: 1, interval_seconds: 60 },
      });
      expect(r.error).toBeUndefined();
      expect(r.dbChanged).toBe(true);
      db = r.db;
      ns.push((r.emits[0]?.event as { n: number } | undefined)?.n);
      expect(r.emits[0]).toEqual({
        event: { greeting: "yo", n: i + 1, interval: 60, every: 60 },
        meta: { id: String(i + 1), summary: `tick ${i + 1}`, ts: 1700000000000 },
      });
    }
    expect(ns).toEqual([1, 2, 3]);
    expect(db).toEqual({ n: 3 });
  });

  it("runs an ESM component with an HTTP shorthand prop and records console output", async () => {
    const code = `export default {
      name: "HTTP", props: { http: "$.interface.http" },
      async run(event) {
        console.log("got", event.method, event.path, { n: 1 });
        console.error("bad %s: %d", "thing", 42);
        console.warn(new Error("careful").message);
        this.$emit({ method: event.method, url: this.http.endpoint_url });
      },
    };`;
    const r = await run(code, { props: { http: { endpoint_url: "http://localhost/e/t0k" } }, event: { method: "POST", path: "/" } });
    expect(r.error).toBeUndefined();
    expect(r.emits).toEqual([{ event: { method: "POST", url: "http://localhost/e/t0k" }, meta: {} }]);
    expect(r.logs.map((l) => [l.k, l.msg])).toEqual([
      ["console.log", "got POST / { n: 1 }"],
      ["console.error", "bad thing: 42"],
      ["console.warn", "careful"],
    ]);
    expect(r.logs.every((l) => Number.isInteger(l.ts))).toBe(true);
    expect(r.dbChanged).toBe(false);
    expect(r.responded).toBe(false);
  });

  it("answers with the first http.respond, coercing a string status and encoding an object body", async () => {
    const code = `module.exports = {
      name: "Echo", props: { http: { type: "$.interface.http", customResponse: true } },
      async run(event) {
        this.http.respond({ status: "201", headers: { "X-Echo": "yes" }, body: { echoed: event.body } });
        this.http.respond({ status: 500, body: "second" });
        this.$emit(event.body);
      },
    };`;
    const responses: HttpResponse[] = [];
    const r = await run(code, {
      props: { http: { endpoint_url: "u" } },
      event: { body: { ping: "pong" } },
      onRespond: (res) => responses.push(res),
    });
    expect(r.error).toBeUndefined();
    expect(r.responded).toBe(true);
    expect(responses).toEqual([
      { status: 201, headers: { "x-echo": "yes", "content-type": "application/json" }, body: '{"echoed":{"ping":"pong"}}' },
    ]);
    expect(r.emits).toHaveLength(1);
  });

  it("rejects an impossible status inside the run", async () => {
    const code = `module.exports = { name: "S", props: { http: "$.interface.http" }, async run() { this.http.respond({ status: "abc" }); } };`;
    const r = await run(code, { onRespond: () => {} });
    expect(r.error?.msg).toMatch(/status must be an integer/);
    expect(r.responded).toBe(false);
  });

  it.each([100, 101, 199, 600])("throws at the respond() call for status %i, which the endpoint would not send", async (status) => {
    const code = `module.exports = { name: "S", props: { http: "$.interface.http" }, async run() {
      try { this.http.respond({ status: ${status} }); } catch (e) { this.$emit(e.message); }
      this.http.respond({ status: 204 });
    } };`;
    const responses: HttpResponse[] = [];
    const r = await run(code, { props: { http: { endpoint_url: "u" } }, onRespond: (res) => responses.push(res) });
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual(["http.respond: status must be an integer from 200 to 599"]);
    // The refused call did not count as the response: the next one is the answer.
    expect(responses.map((res) => res.status)).toEqual([204]);
  });

  it("accepts the endpoint's whole range, 200 to 599", async () => {
    for (const status of [200, 599]) {
      const code = `module.exports = { name: "S", props: { http: "$.interface.http" }, async run() { this.http.respond({ status: ${status} }); } };`;
      const responses: HttpResponse[] = [];
      const r = await run(code, { props: { http: { endpoint_url: "u" } }, onRespond: (res) => responses.push(res) });
      expect(r.error).toBeUndefined();
      expect(responses.map((res) => res.status)).toEqual([status]);
    }
  });

  it("binds methods to the component's this", async () => {
    const code = `module.exports = {
      name: "M", props: { word: "string" },
      methods: { shout() { return this.word.toUpperCase() + "!"; }, twice() { return this.shout() + this.shout(); } },
      async run() { const f = this.twice; this.$emit(f()); },
    };`;
    const r = await run(code, { props: { word: "hi" } });
    expect(r.emits[0]?.event).toBe("HI!HI!");
  });

  it("records a thrown error with its message and stack", async () => {
    const r = await run(`module.exports = { name: "T", async run(e) { this.$emit(1); throw new TypeError("boom " + e.n); } };`, {
      event: { n: 7 },
    });
    expect(r.error).toMatchObject({ code: "TypeError", msg: "boom 7" });
    expect(r.error?.stack).toMatch(/TypeError: boom 7\n\s+at /);
    expect(Number.isNaN(Date.parse(r.error?.ts ?? ""))).toBe(false);
    expect(r.emits).toHaveLength(1); // emitted before the throw; the caller decides what to keep
  });

  it("uses an error's code when it has one, and survives throwing non-errors", async () => {
    expect(
      (await run(`module.exports = { name: "C", async run() { const e = new Error("x"); e.code = "E_X"; throw e; } };`)).error?.code,
    ).toBe("E_X");
    expect((await run(`module.exports = { name: "C", async run() { throw "plain"; } };`)).error).toMatchObject({
      code: "Error",
      msg: "plain",
    });
  });

  it("runs hooks, and treats a missing hook as done", async () => {
    const code = `module.exports = { name: "H", hooks: { async deploy() { this.db.set("deployed", true); this.$emit({ sample: 1 }); } }, async run() {} };`;
    const deployed = await run(code, { method: "deploy" });
    expect(deployed.error).toBeUndefined();
    expect(deployed.db).toEqual({ deployed: true });
    expect(deployed.emits).toHaveLength(1);
    const activated = await run(code, { method: "activate" });
    expect(activated.error).toBeUndefined();
    expect(activated.emits).toEqual([]);
  });

  it("exposes the source id as process.env.PD_COMPONENT", async () => {
    const r = await run(`module.exports = { name: "P", async run() { this.$emit(process.env.PD_COMPONENT); } };`, { sourceId: "dc_abc" });
    expect(r.emits[0]?.event).toBe("dc_abc");
  });

  it("gives db values back as copies and deletes keys set to undefined", async () => {
    const code = `module.exports = { name: "D", async run() {
      const o = this.db.get("o"); o.mutated = true;
      this.$emit({ before: this.db.get("o"), missing: this.db.get("nope") === undefined });
      this.db.set("gone", undefined);
    } };`;
    const r = await run(code, { db: { o: { a: 1 }, gone: 1 } });
    expect(r.emits[0]?.event).toEqual({ before: { a: 1 }, missing: true });
    expect(r.db).toEqual({ o: { a: 1 } });
  });

  it("returns the caller's db untouched when the run changes nothing", async () => {
    const db = { a: 1 };
    const r = await run(`module.exports = { name: "R", async run() { this.db.get("a"); } };`, { db });
    expect(r.dbChanged).toBe(false);
    expect(r.db).toBe(db);
  });

  it("fetches through the injected host fetch", async () => {
    const code = `module.exports = { name: "F", async run() {
      const res = await fetch("https://api.example.com/x", { method: "post", headers: { "X-Key": "k" }, body: JSON.stringify({ q: 1 }) });
      this.$emit({ status: res.status, ok: res.ok, type: res.headers.get("Content-Type"), body: await res.json() });
      try { await fetch("https://fail.example.com"); } catch (e) { this.$emit({ failed: e.message }); }
    } };`;
    fetched.length = 0;
    const r = await run(code);
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([
      { status: 200, ok: true, type: "application/json", body: { echo: "https://api.example.com/x" } },
      { failed: "fetch failed: connection refused" },
    ]);
    expect(fetched[0]).toMatchObject({
      url: "https://api.example.com/x",
      init: { method: "POST", headers: { "X-Key": "k" }, body: '{"q":1}' },
    });
    expect(fetched[0]?.init.signal.aborted).toBe(true); // the run is over
  });

  it("refuses fetch by default", async () => {
    const plain = new Sandbox({ memoryMb: 32, timeoutMs: 1000 });
    try {
      const compiledCode = await compileComponent(`module.exports = { name: "F", async run() { await fetch("https://x"); } };`, {
        allowedPackages,
      });
      const r = await plain.run({ compiledCode, sourceId: "s", method: "run", props: {}, db: {} });
      expect(r.error?.msg).toMatch(/fetch unavailable/);
    } finally {
      plain.close();
    }
  });

  it("provides axios from @pipedream/platform on top of fetch", async () => {
    const code = `import { axios, DEFAULT_POLLING_SOURCE_TIMER_INTERVAL } from "@pipedream/platform";
    export default { name: "A", async run() {
      const data = await axios(this, { url: "/things", baseURL: "https://api.example.com/v1", params: { q: "a b", n: 2 } });
      let status;
      try { await axios(this, { url: "https://api.example.com/404" }); } catch (e) { status = e.response.status; }
      this.$emit({ data, status, interval: DEFAULT_POLLING_SOURCE_TIMER_INTERVAL });
    } };`;
    const r = await run(code);
    expect(r.error).toBeUndefined();
    expect(r.emits[0]?.event).toEqual({ data: { echo: "https://api.example.com/v1/things?q=a%20b&n=2" }, status: 404, interval: 900 });
  });

  it("lets CommonJS require @pipedream/platform", async () => {
    const r = await run(`const { axios } = require("@pipedream/platform");
      module.exports = { name: "R", async run() { this.$emit(await axios(this, { url: "https://api.example.com/r" })); } };`);
    expect(r.emits[0]?.event).toEqual({ echo: "https://api.example.com/r" });
  });

  it("supports the rest of the console API without failing", async () => {
    const r = await run(`module.exports = { name: "C", async run() {
      console.assert(1 === 2, "math"); console.count(); console.count(); console.table([1]); console.group(); console.groupEnd();
      console.time("t"); console.timeEnd("t"); console.debug("%o|%j|%i|%%", { a: [1] }, { b: 2 }, "42.5");
    } };`);
    expect(r.error).toBeUndefined();
    expect(r.logs.map((l) => l.msg)).toEqual([
      "Assertion failed: math",
      "default: 1",
      "default: 2",
      "[ 1 ]",
      expect.stringMatching(/^t: \d+ms$/),
      '{ a: [ 1 ] }|{"b":2}|42|%',
    ]);
  });

  it("bundles allowed packages into the run", async () => {
    const r = await run(`import ms from "ms"; export default { name: "B", async run() { this.$emit(ms("2h")); } };`);
    expect(r.emits[0]?.event).toBe(7_200_000);
  });

  it("fires timers and clears them", async () => {
    const code = `module.exports = { name: "T", async run() {
      const order = [];
      const cleared = setTimeout(() => order.push("cleared"), 5);
      clearTimeout(cleared);
      await new Promise((resolve) => setTimeout(() => { order.push("timeout"); resolve(); }, 10));
      let ticks = 0;
      await new Promise((resolve) => { const h = setInterval(() => { if (++ticks === 3) { clearInterval(h); resolve(); } }, 1); });
      order.push("ticks:" + ticks);
      this.$emit(order);
    } };`;
    const r = await run(code);
    expect(r.error).toBeUndefined();
    expect(r.emits[0]?.event).toEqual(["timeout", "ticks:3"]);
  });

  it("fails the run when a timer callback throws", async () => {
    const r = await run(
      `module.exports = { name: "T", async run() { setTimeout(() => { throw new Error("late"); }, 1); await new Promise(() => {}); } };`,
    );
    expect(r.error).toMatchObject({ msg: "late" });
  });

  it("queues runs of other users beyond maxIsolates without charging them the wait", async () => {
    const one = new Sandbox({ memoryMb: 32, timeoutMs: 1000 }, { maxIsolates: 1 });
    try {
      const compiledCode = await compileComponent(
        `module.exports = { name: "W", async run() { await new Promise((r) => setTimeout(r, 100)); } };`,
        { allowedPackages },
      );
      const started = Date.now();
      // Three users: each needs an isolate of their own, and only one may live at a time.
      const results = await Promise.all(
        [1, 2, 3].map((i) => one.run({ compiledCode, userId: `u${i}`, sourceId: `s${i}`, method: "run", props: {}, db: {} })),
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(290);
      for (const r of results) {
        expect(r.error).toBeUndefined();
        expect(r.durationMs).toBeLessThan(250);
      }
    } finally {
      one.close();
    }
  });

  it("provides btoa and atob", async () => {
    const r = await run(`module.exports = { name: "B", async run() { this.$emit([btoa("user:pass"), atob("aGk="), btoa("a")]); } };`);
    expect(r.emits[0]?.event).toEqual(["dXNlcjpwYXNz", "hi", "YQ=="]);
  });
});
