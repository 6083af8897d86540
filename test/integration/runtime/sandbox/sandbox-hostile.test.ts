import { afterAll, describe, expect, it } from "vitest";
import { ValidationError } from "../../../../src/domain/errors.js";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";
import type { RunRequest } from "../../../../src/runtime/sandbox/types.js";

// Component code that tries to hang, exhaust or escape the sandbox; the daemon must carry on.

const allowedPackages = ["@pipedream/platform"];
const sandbox = new Sandbox({
  memoryMb: 32,
  timeoutMs: 500,
  maxLogLinesPerRun: 5,
  maxEmitsPerRun: 3,
  maxEventBytes: 1024,
  maxDbBytes: 2048,
});
afterAll(() => {
  sandbox.close();
  roomy.close();
});

/** Memory tests get a roomy time limit, so a busy CPU cannot turn MEMORY_LIMIT into TIMEOUT. */
const roomy = new Sandbox({ memoryMb: 32, timeoutMs: 10_000 });

async function run(code: string, req: Partial<RunRequest> = {}, box: Sandbox = sandbox) {
  const compiledCode = await compileComponent(code, { allowedPackages });
  return box.run({ compiledCode, sourceId: "dc_hostile", method: "run", props: {}, db: {}, ...req });
}

const healthy = async () => {
  const r = await run(`module.exports = { name: "ok", async run() { this.$emit("fine"); } };`);
  expect(r.error).toBeUndefined();
  expect(r.emits[0]?.event).toBe("fine");
};

describe("Sandbox against hostile code", () => {
  it("stops a synchronous infinite loop at the time limit", async () => {
    const r = await run(`module.exports = { name: "Loop", async run() { console.log("start"); while (true) {} } };`);
    expect(r.error?.code).toBe("TIMEOUT");
    expect(r.durationMs).toBeGreaterThanOrEqual(450);
    expect(r.durationMs).toBeLessThan(2000);
    expect(r.logs.map((l) => l.msg)).toEqual(["start"]); // what happened before the kill is kept
    await healthy();
  });

  it("stops a run whose promise never settles", async () => {
    const r = await run(`module.exports = { name: "Never", async run() { await new Promise(() => {}); } };`);
    expect(r.error?.code).toBe("TIMEOUT");
    expect(r.durationMs).toBeLessThan(2000);
    await healthy();
  });

  it("stops a loop that starts after an await", async () => {
    const r = await run(`module.exports = { name: "Later", async run() { await new Promise((r) => setTimeout(r, 10)); for (;;) {} } };`);
    expect(r.error?.code).toBe("TIMEOUT");
    await healthy();
  });

  it("ends a memory hog with MEMORY_LIMIT", async () => {
    const r = await run(
      `module.exports = { name: "Hog", async run() { const a = []; while (true) a.push(new Array(1e6).fill(1)); } };`,
      { userId: "u_hog" },
      roomy,
    );
    expect(r.error?.code).toBe("MEMORY_LIMIT");
    await healthy();
  });

  it("ends a memory hog that starts after an await", async () => {
    const r = await run(
      `module.exports = { name: "Hog", async run() {
      await new Promise((r) => setTimeout(r, 5)); const a = []; while (true) a.push(new Array(1e6).fill(1)); } };`,
      {},
      roomy,
    );
    expect(r.error?.code).toBe("MEMORY_LIMIT");
    await healthy();
  });

  it("runs many hostile runs concurrently without hurting the healthy ones", async () => {
    // Each its own user: a user's runs share an isolate, so a loop holds up that user's other runs.
    const loop = run(`module.exports = { name: "Loop", async run() { while (true) {} } };`, { userId: "u_loop" });
    // The hog gets the roomy time limit: with a busy CPU it may not fill 32 MB within 500 ms, and
    // a time-out would then be the right verdict (see "Memory tests get a roomy time limit").
    const hog = run(
      `module.exports = { name: "Hog", async run() { const a = []; while (true) a.push(new Array(1e6).fill(1)); } };`,
      { userId: "u_hog" },
      roomy,
    );
    const fine = Array.from({ length: 5 }, (_, i) =>
      run(`module.exports = { name: "ok", async run() { this.$emit(${i}); } };`, { userId: `u_fine${i}` }),
    );
    const [l, h, ...ok] = await Promise.all([loop, hog, ...fine]);
    expect(l?.error?.code).toBe("TIMEOUT");
    expect(h?.error?.code, JSON.stringify(h?.error)).toBe("MEMORY_LIMIT");
    expect(ok.map((r) => r.emits[0]?.event)).toEqual([0, 1, 2, 3, 4]);
  });

  it("does not expose Node through the Function constructor", async () => {
    const code = `module.exports = { name: "Escape", async run() {
      const viaThis = this.constructor.constructor("return typeof process === 'object' ? Object.keys(process) : 'none'")();
      const g = Function("return this")();
      this.$emit({
        viaThis,
        globalRequire: typeof g.require,
        binding: typeof process.binding,
        buffer: typeof g.Buffer,
        mainModule: typeof process.mainModule,
        ivm: typeof g._ivm + typeof g.ivm,
        envKeys: Object.keys(process.env),
        wasm: typeof g.WebAssembly,
      });
    } };`;
    const r = await run(code);
    expect(r.error).toBeUndefined();
    expect(r.emits[0]?.event).toEqual({
      viaThis: ["env"],
      globalRequire: "undefined",
      binding: "undefined",
      buffer: "undefined",
      mainModule: "undefined",
      ivm: "undefinedundefined",
      envKeys: ["PD_COMPONENT"],
      wasm: "undefined",
    });
  });

  it("keeps globals reachable by component code free of host functions", async () => {
    const code = `module.exports = { name: "Globals", async run() {
      const hostish = [];
      for (const name of Object.getOwnPropertyNames(globalThis)) {
        const v = globalThis[name];
        if (typeof v === "function" && /native code/.test(Function.prototype.toString.call(v)) && !/^[A-Z]/.test(name) && !["parseFloat","parseInt","decodeURI","decodeURIComponent","encodeURI","encodeURIComponent","escape","unescape","eval","isFinite","isNaN"].includes(name)) hostish.push(name);
      }
      for (const k of Object.keys(console)) if (/native code/.test(Function.prototype.toString.call(console[k]))) hostish.push("console." + k);
      this.$emit(hostish);
    } };`;
    const r = await run(code);
    expect(r.emits[0]?.event).toEqual([]);
  });

  it("does not let prototype pollution reach the next run", async () => {
    const polluter = await run(`module.exports = { name: "Pollute", async run() {
      Object.prototype.polluted = "yes"; Array.prototype.push = () => 0; JSON.stringify = () => "{}"; globalThis.leftover = 1;
    } };`);
    expect(polluter.error).toBeUndefined();
    const probe = await run(`module.exports = { name: "Probe", async run() {
      const a = []; a.push(1);
      this.$emit({ polluted: ({}).polluted ?? null, pushed: a.length, leftover: typeof leftover });
    } };`);
    expect(probe.emits[0]?.event).toEqual({ polluted: null, pushed: 1, leftover: "undefined" });
  });

  it("rejects require('fs') and import fs at compile time", async () => {
    await expect(
      compileComponent(`import fs from "fs"; export default { name: "x", async run() {} };`, { allowedPackages }),
    ).rejects.toThrowError(ValidationError);
    await expect(
      compileComponent(`const cp = require("child_process"); module.exports = {};`, { allowedPackages: ["child_process"] }),
    ).resolves.toContain("package child_process is not allowed");
  });

  it("fails require('fs') inside run without reaching the file system", async () => {
    const r = await run(`module.exports = { name: "Req", async run() {
      let leaked = "none";
      try { leaked = String(require("fs").readFileSync("/etc/passwd")).slice(0, 20); } catch (e) { leaked = "blocked: " + e.message; }
      this.$emit({ leaked, dynamic: await import("os").then(() => "loaded", (e) => e.message) });
    } };`);
    expect(r.emits[0]?.event).toEqual({ leaked: "blocked: package fs is not allowed", dynamic: "package os is not allowed" });
  });

  it("keeps what a run may leave behind within its limits", async () => {
    const r = await run(`module.exports = { name: "Lots", async run() {
      for (let i = 0; i < 20; i++) console.log("line", i);
      const caught = [];
      try { this.$emit("x".repeat(5000)); } catch (e) { caught.push(e.message); }
      for (let i = 0; i < 5; i++) { try { this.$emit(i); } catch (e) { caught.push(e.message); } }
      try { this.db.set("big", "y".repeat(5000)); } catch (e) { caught.push(e.message); }
      console.error(caught.join(" | "));
    } };`);
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([0, 1, 2]);
    expect(r.logs).toHaveLength(6);
    expect(r.logs[5]?.msg).toMatch(/16 more console lines were dropped/);
    expect(r.db).toEqual({});
  });

  it("keeps host stack traces out of the sandbox", async () => {
    const r = await run(`module.exports = { name: "Stack", async run() {
      try { this.$emit(1, "not an object"); } catch (e) { this.$emit(String(e.stack)); }
      try { this.http.respond({ status: 42 }); } catch (e) { this.$emit(String(e.stack)); }
    } };`);
    const stacks = r.emits.map((e) => String(e.event)).join("\n");
    expect(stacks).not.toMatch(/host-bridge|node_modules|\/work\//);
  });

  it("fails a run after close and stays closed", async () => {
    const s = new Sandbox({ memoryMb: 32, timeoutMs: 500 });
    const compiledCode = await compileComponent(`module.exports = { name: "x", async run() { while (true) {} } };`, { allowedPackages });
    const pending = s.run({ compiledCode, sourceId: "s", method: "run", props: {}, db: {} });
    await new Promise((r) => setTimeout(r, 50));
    s.close();
    s.close();
    expect((await pending).error?.code).toBe("SANDBOX_CLOSED");
    await expect(s.run({ compiledCode, sourceId: "s", method: "run", props: {}, db: {} })).rejects.toThrowError(/closed/);
  });
});

describe("Sandbox isolate reuse", () => {
  it("runs a thousand times in one reused isolate without leaking memory", async () => {
    // One isolate, 16 MB: before contexts were released, each run kept ~140 KB alive and this
    // isolate hit its memory limit after about a hundred runs.
    const single = new Sandbox({ memoryMb: 16, timeoutMs: 5_000 }, { maxIsolates: 1, maxIdleIsolates: 1 });
    try {
      const compiledCode = await compileComponent(
        `module.exports = { name: "t", async run(e) { this.$emit({ i: e.i, pad: "x".repeat(1000) }); } };`,
        {
          allowedPackages,
        },
      );
      const failures: string[] = [];
      for (let i = 0; i < 1000; i++) {
        const r = await single.run({ compiledCode, sourceId: "dc_reuse", method: "run", props: {}, db: {}, event: { i } });
        if (r.error) failures.push(`${i}: ${r.error.code}`);
      }
      expect(failures).toEqual([]);
    } finally {
      single.close();
    }
  });
});
