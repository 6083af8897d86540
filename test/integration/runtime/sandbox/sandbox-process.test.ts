import { afterEach, describe, expect, it } from "vitest";
import { ProcessSandbox, type SandboxCrash } from "../../../../src/runtime/sandbox/process-sandbox.js";
import type { HostFetch, HttpResponse, RunRequest } from "../../../../src/runtime/sandbox/types.js";
import { waitFor } from "../../../helpers/receiver.js";

/**
 * The daemon's sandbox runs the isolates in a process of its own (process-sandbox.ts), so that what
 * V8 cannot contain ends that process and not the daemon. A Set grown until the memory runs out is
 * such a case (V8 doubles its table in one allocation past the heap's limit; isolated-vm can only
 * report a catastrophic error, after which the process must end): in-process, it aborts whatever
 * hosts the isolate.
 */

const CATASTROPHE = "const s = new Set(); for (let i = 0; ; i++) s.add(i);";
const boxes: ProcessSandbox[] = [];

afterEach(() => {
  for (const b of boxes.splice(0)) b.close();
});

function box(options: ConstructorParameters<typeof ProcessSandbox>[1] = {}, timeoutMs = 10_000) {
  const crashes: SandboxCrash[] = [];
  const b = new ProcessSandbox({ memoryMb: 32, timeoutMs }, { onCrash: (c) => crashes.push(c), ...options });
  boxes.push(b);
  return { b, crashes };
}

const component = (body: string) => `module.exports = { name: "p", props: { http: "$.interface.http" }, async run(event) { ${body} } };`;

function request(body: string, extra: Partial<RunRequest> = {}): RunRequest {
  return {
    compiledCode: component(body),
    sourceId: "dc_proc",
    method: "run",
    props: { http: { endpoint_url: "u" } },
    db: { kept: 1 },
    ...extra,
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("ProcessSandbox", () => {
  it("runs components as Sandbox does: emits, logs, db, the event, respond() and fetch through the daemon", async () => {
    const fetched: string[] = [];
    const fetch: HostFetch = async (url, init) => {
      fetched.push(`${init.method} ${url} ${String(init.body)}`);
      return { status: 200, headers: { "content-type": "text/plain" }, body: "pong" };
    };
    const { b } = box({ fetch });
    const responses: HttpResponse[] = [];
    const r = await b.run(
      request(
        `const res = await fetch("http://example.test/x", { method: "POST", body: "ping" });
         this.$emit({ got: await res.text(), n: event.n }, { id: 7 });
         console.log("hello", this.db.get("kept"));
         this.db.set("added", 2);
         this.http.respond({ status: 201, headers: { "x-a": "b" }, body: new Uint8Array([104, 105]) });`,
        { event: { n: 5 }, onRespond: (res) => responses.push(res) },
      ),
    );
    expect(r.error).toBeUndefined();
    expect(r.emits).toEqual([{ event: { got: "pong", n: 5 }, meta: { id: 7 } }]);
    expect(r.logs.map((l) => l.msg)).toEqual(["hello 1"]);
    expect(r).toMatchObject({ db: { kept: 1, added: 2 }, dbChanged: true, responded: true });
    expect(fetched).toEqual(["POST http://example.test/x ping"]);
    expect(responses).toHaveLength(1);
    expect(responses[0]?.status).toBe(201);
    expect(responses[0]?.headers["x-a"]).toBe("b");
    expect(Buffer.isBuffer(responses[0]?.body) && responses[0]?.body.toString()).toBe("hi");
  }, 60_000);

  it("ends the run V8 lost control of with MEMORY_LIMIT, lets another run finish, and serves the next one from a fresh process", async () => {
    const { b, crashes } = box();
    expect((await b.run(request(`this.$emit("warm")`))).emits).toHaveLength(1);
    // On a starved CPU the memory limit's clean disposal can come first: then it is tried again.
    for (let attempt = 1; ; attempt++) {
      const [first] = b.processIds();
      // Another user's run: in an isolate of its own (the culprit's takes its user's runs with it).
      const bystander = b.run(
        request(`await new Promise((r) => setTimeout(r, 1500)); this.$emit("bystander done");`, {
          userId: "u_other",
          sourceId: "dc_other",
        }),
      );
      const culprit = await b.run(request(CATASTROPHE));
      expect(culprit.error?.code).toBe("MEMORY_LIMIT");
      const caught = /in a way V8 could not contain \(Catastrophic out-of-memory error\)/.test(culprit.error?.msg ?? "");
      // New work goes to a fresh process while the old one finishes the bystander.
      const next = await b.run(request(`this.$emit("next")`));
      expect(next.emits.map((e) => e.event)).toEqual(["next"]);
      expect((await bystander).emits.map((e) => e.event)).toEqual(["bystander done"]);
      if (!caught) {
        expect(attempt, "no catastrophe in 5 attempts").toBeLessThan(5);
        continue;
      }
      // The old process ends (it kills itself: no core dump) and is reported once.
      await waitFor(() => crashes.length === 1, { timeoutMs: 20_000, what: "the crash report" });
      expect(crashes[0]).toMatchObject({ message: "Catastrophic out-of-memory error", signal: "SIGKILL", lost: 0 });
      expect(first !== undefined && alive(first)).toBe(false);
      return;
    }
  }, 120_000);

  it("answers a metadata read V8 lost control of with the memory limit, and reads the next one", async () => {
    const { b, crashes } = box();
    for (let attempt = 1; crashes.length === 0; attempt++) {
      expect(attempt, "no catastrophe in 5 attempts").toBeLessThanOrEqual(5);
      const bad = await b.inspect(`${CATASTROPHE}\nmodule.exports = { name: "boom", async run() {} };`, 5000);
      // The same answer whether V8 lost control or the memory limit's clean disposal came first.
      expect(bad).toEqual({ ok: false, reason: "the code used more than 32 MB while loading" });
      expect(await b.inspect(`module.exports = { name: "fine", async run() {} };`, 5000)).toMatchObject({
        ok: true,
        component: { name: "fine" },
      });
      // A crash is reported once the old process has ended (it has no other work).
      await waitFor(() => crashes.length === 1 || b.processIds().length === 1, { timeoutMs: 20_000, what: "the old process to end" });
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(crashes[0]).toMatchObject({ message: "Catastrophic out-of-memory error", signal: "SIGKILL" });
  }, 120_000);

  it("ends the runs of a process that dies under them with SANDBOX_CRASHED, and reads lost metadata again", async () => {
    const { b, crashes } = box();
    expect((await b.run(request(`this.$emit("warm")`))).emits).toHaveLength(1);
    const [pid] = b.processIds();
    const run = b.run(request(`this.$emit("before"); await new Promise((r) => setTimeout(r, 5000));`, { db: { state: "kept" } }));
    const inspect = b.inspect(
      `const until = Date.now() + 1500; while (Date.now() < until) {} module.exports = { name: "slow", async run() {} };`,
      5000,
    );
    await new Promise((r) => setTimeout(r, 300));
    if (pid !== undefined) process.kill(pid, "SIGKILL");
    const r = await run;
    expect(r.error?.code).toBe("SANDBOX_CRASHED");
    expect(r.error?.msg).toMatch(/the sandbox process ended during the run \(signal SIGKILL\)/);
    expect(r).toMatchObject({ emits: [], db: { state: "kept" }, dbChanged: false });
    // The metadata read has no side effect: it is done again in a fresh process.
    expect(await inspect).toMatchObject({ ok: true, component: { name: "slow" } });
    expect(crashes).toEqual([expect.objectContaining({ signal: "SIGKILL", lost: 2 })]);
    expect(crashes[0]?.message).toBeUndefined();
  }, 60_000);

  it("ends runs in progress with SANDBOX_CLOSED on close(), ends its processes and reports no crash", async () => {
    const { b, crashes } = box();
    expect((await b.run(request(`this.$emit("warm")`))).emits).toHaveLength(1);
    const pids = b.processIds();
    const run = b.run(request(`await new Promise(() => {});`));
    await new Promise((r) => setTimeout(r, 200));
    b.close();
    expect((await run).error?.code).toBe("SANDBOX_CLOSED");
    expect((await b.run(request(`this.$emit("late")`))).error?.code).toBe("SANDBOX_CLOSED");
    await waitFor(() => pids.every((p) => !alive(p)), { timeoutMs: 20_000, what: "the sandbox process to end" });
    expect(crashes).toEqual([]);
  }, 60_000);
});

describe("compiled code by key (issue 12 item 2)", () => {
  it("sends a code to the sandbox process once per key, runs later runs from the process's copy, and a new key brings its code", async () => {
    const { b } = box();
    const v1 = request(`this.$emit("v1")`, { codeKey: "sc_a:h1" });
    const v2 = request(`this.$emit("v2")`, { codeKey: "sc_b:h2" });
    const events = async (r: RunRequest) => (await b.run(r)).emits.map((e) => e.event);
    expect(await events(v1)).toEqual(["v1"]);
    expect(b.codeTransfers).toBe(1);
    // The same key again: the code does not cross, and the run is still this code's.
    expect(await events(v1)).toEqual(["v1"]);
    expect(await events({ ...v1, sourceId: "dc_other" })).toEqual(["v1"]);
    expect(b.codeTransfers).toBe(1);
    // A redeploy is a new key: its code crosses and runs, never the old one.
    expect(await events(v2)).toEqual(["v2"]);
    expect(b.codeTransfers).toBe(2);
    // Without a key the code crosses every time (and is its own key).
    const keyless = request(`this.$emit("keyless")`);
    expect(await events(keyless)).toEqual(["keyless"]);
    expect(await events(keyless)).toEqual(["keyless"]);
    expect(b.codeTransfers).toBe(4);
  }, 60_000);

  it("sends the code again when the process has dropped it (its cache holds less than one code)", async () => {
    const { b } = box({ codeCacheBytes: 10 });
    const r = request(`this.$emit("again")`, { codeKey: "sc_c:h3" });
    for (let i = 0; i < 3; i++) expect((await b.run(r)).emits.map((e) => e.event)).toEqual(["again"]);
    // Each run was sent without its code first, answered "need the code", and sent with it.
    expect(b.codeTransfers).toBe(3);
  }, 60_000);
});
