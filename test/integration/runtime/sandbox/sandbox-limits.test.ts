import { afterAll, describe, expect, it } from "vitest";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";

/**
 * What a run can make the daemon hold: memory outside the isolate's heap, and what it hands to the
 * host. An isolate's memory limit bounds nothing in the daemon itself, so every value is cut or
 * refused in the guest before it is copied out, and checked again by the host.
 */

const MB = 1024 * 1024;
const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: 30_000 });
const small = new Sandbox({ memoryMb: 32, timeoutMs: 10_000, maxEventBytes: 1024 });
afterAll(() => {
  sandbox.close();
  small.close();
});

async function run(body: string, box: Sandbox = sandbox) {
  const compiledCode = await compileComponent(`module.exports = { name: "Limits", async run() { ${body} } };`, { allowedPackages: [] });
  return box.run({ compiledCode, sourceId: "dc_limits", method: "run", props: {}, db: {} });
}

const rss = () => process.memoryUsage.rss();

describe("memory outside the isolate's heap", () => {
  it("refuses resizable ArrayBuffers, which grew past the memory limit into the daemon", async () => {
    const before = rss();
    const r = await run(`const keep = [];
      for (let i = 0; i < 4; i++) {
        const b = new ArrayBuffer(0, { maxByteLength: 100e6 });
        b.resize(100e6);
        new Uint8Array(b).fill(1);
        keep.push(b);
      }`);
    const grown = rss() - before;
    expect(r.error?.code).toBe("TypeError");
    expect(r.error?.msg).toMatch(/resizable ArrayBuffers \(maxByteLength\) are not available/);
    // Before: the 64 MB isolate held 400 MB, and the daemon kept it after the run.
    expect(grown, `RSS grew by ${Math.round(grown / MB)} MB`).toBeLessThan(100 * MB);
  });

  it("leaves no way around the refusal", async () => {
    const r = await run(`const tries = {
        viaBuffer: () => new (new Uint8Array(1).buffer.constructor)(0, { maxByteLength: 1e6 }),
        viaSubclass: () => new (class extends ArrayBuffer {})(0, { maxByteLength: 1e6 }),
        viaReflect: () => Reflect.construct(ArrayBuffer, [0, { maxByteLength: 1e6 }]),
        viaPrototype: () => new ArrayBuffer.prototype.constructor(0, { maxByteLength: 1e6 }),
        viaSlice: () => new ArrayBuffer(8).slice(0, 4).constructor === ArrayBuffer ? "same constructor" : "other",
        viaSpecies: () => ArrayBuffer[Symbol.species] === ArrayBuffer ? "same constructor" : "other",
      };
      const out = {};
      for (const [k, f] of Object.entries(tries)) { try { out[k] = f(); } catch (e) { out[k] = e.message; } }
      out.methods = ["resize", "transfer", "transferToFixedLength"].map((m) => typeof ArrayBuffer.prototype[m]);
      out.globals = ["WebAssembly", "SharedArrayBuffer", "Atomics"].map((g) => typeof globalThis[g]);
      try { new ArrayBuffer(200e6); out.huge = "allocated"; } catch (e) { out.huge = e.name; }
      try { new Float64Array(50e6); out.hugeTyped = "allocated"; } catch (e) { out.hugeTyped = e.name; }
      out.fixed = new ArrayBuffer(16).byteLength + new Uint8Array(new ArrayBuffer(8)).length;
      this.$emit(out);`);
    const refused = "resizable ArrayBuffers (maxByteLength) are not available in the sandbox";
    expect(r.error).toBeUndefined();
    expect(r.emits[0]?.event).toEqual({
      viaBuffer: refused,
      viaSubclass: refused,
      viaReflect: refused,
      viaPrototype: refused,
      viaSlice: "same constructor",
      viaSpecies: "same constructor",
      methods: ["undefined", "undefined", "undefined"],
      globals: ["undefined", "undefined", "undefined"],
      huge: "RangeError",
      hugeTyped: "RangeError",
      fixed: 24,
    });
  });

  it("refuses resizable ArrayBuffers while a component is loaded for its metadata", async () => {
    const code = await compileComponent(
      `const b = new ArrayBuffer(0, { maxByteLength: 100e6 }); b.resize(100e6);
      module.exports = { name: "At load", async run() {} };`,
      { allowedPackages: [] },
    );
    const r = await sandbox.inspect(code, 5_000);
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/resizable ArrayBuffers \(maxByteLength\) are not available/) });
  });
});

describe("what a run hands to the host", () => {
  it("cuts long console lines in the guest, so the daemon holds none of the long string", async () => {
    const before = rss();
    const r = await run(`const big = "x".repeat(8e6); for (let i = 0; i < 30; i++) console.log(big + i);`);
    const grown = rss() - before;
    expect(r.error).toBeUndefined();
    expect(r.logs).toHaveLength(30);
    for (const l of r.logs) expect(l.msg).toMatch(/^x{16384}… \[79836(17|18) more characters\]$/);
    // Before: each line was a slice of an 8 MB copy in the daemon, which kept all 30 copies alive.
    expect(grown, `RSS grew by ${Math.round(grown / MB)} MB`).toBeLessThan(100 * MB);
  });

  it("refuses an over-limit event in the guest without copying it to the daemon", async () => {
    const before = performance.eventLoopUtilization();
    const r = await run(`const big = "x".repeat(20e6); const errors = new Set();
      for (let i = 0; i < 20; i++) { try { this.$emit(big); } catch (e) { errors.add(e.message); } }
      this.$emit([...errors]);`);
    const busy = performance.eventLoopUtilization(before).active;
    // Before: the daemon's event loop copied and measured 400 MB (over a second of its time).
    expect(busy, `the daemon's event loop was busy for ${Math.round(busy)} ms`).toBeLessThan(500);
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([["$emit: the event is at least 20000002 bytes as JSON; the limit is 1048576"]]);
  });

  it("holds its limits when the component replaces the built-ins they use", async () => {
    const before = performance.eventLoopUtilization();
    const r = await run(`const big = "y".repeat(8e6);
      String.prototype.slice = () => big;
      String.prototype.substring = () => big;
      Array.prototype.join = () => big;
      Object.prototype.toJSON = () => big;
      const caught = [];
      for (let i = 0; i < 20; i++) {
        console.log("a".repeat(100000));
        try { this.$emit(i, { summary: "s" }); } catch (e) { caught.push(e.message); }
      }
      delete Object.prototype.toJSON;
      this.$emit([...new Set(caught)]);
      throw new Error("z".repeat(1e6));`);
    const busy = performance.eventLoopUtilization(before).active;
    expect(r.emits.map((e) => e.event)).toEqual([["$emit: the metadata is too large"]]);
    expect(r.logs).toHaveLength(20);
    for (const l of r.logs) expect(l.msg.length).toBeLessThan(16 * 1024 + 64);
    expect(r.error?.msg.length).toBeLessThanOrEqual(4 * 1024 + 1);
    expect(busy, `the daemon's event loop was busy for ${Math.round(busy)} ms`).toBeLessThan(500);
  });

  it("cuts a huge error message and stack in the guest", async () => {
    const r = await run(`throw new Error("e".repeat(20e6));`);
    expect(r.error?.code).toBe("Error");
    expect(r.error?.msg.length).toBeLessThanOrEqual(4 * 1024 + 1);
    expect(r.error?.stack.length).toBeLessThanOrEqual(16 * 1024 + 1);
  });
});

describe("$emit metadata", () => {
  it("applies the ingress's limits to summary, id and name inside the run", async () => {
    const r = await run(`const tries = [
        { summary: "s".repeat(4e6) },
        { summary: "s".repeat(10001) },
        { id: "i".repeat(1001) },
        { name: "n".repeat(5000) },
        { name: "bad\\u0001name" },
        { name: "tab\\tname" },
      ];
      for (const meta of tries) { try { this.$emit("refused", meta); } catch (e) { this.$emit(e.message); } }
      this.$emit("kept", { summary: "s".repeat(10000), id: "i".repeat(1000), name: "n".repeat(200) });
      this.$emit("coerced", { summary: { a: 1 }, id: { b: 2 }, ts: "2026-01-02T03:04:05Z" });`);
    expect(r.error).toBeUndefined();
    expect(r.emits.slice(0, 6).map((e) => e.event)).toEqual([
      "$emit: meta.summary must be at most 10000 characters",
      "$emit: meta.summary must be at most 10000 characters",
      "$emit: meta.id must be at most 1000 characters",
      "$emit: meta.name must be at most 200 characters",
      "$emit: meta.name must not contain control characters",
      "$emit: meta.name must not contain control characters",
    ]);
    expect(r.emits[6]?.meta).toEqual({ summary: "s".repeat(10000), id: "i".repeat(1000), name: "n".repeat(200) });
    expect(r.emits[7]?.meta).toEqual({ summary: '{"a":1}', id: '{"b":2}', ts: Date.parse("2026-01-02T03:04:05Z") });
  });

  it("counts metadata in the run's emitted bytes", async () => {
    // maxEventBytes 1024: a run may emit 16 KB of events and metadata together.
    const r = await run(
      `const out = [];
      for (let i = 0; i < 3; i++) { try { this.$emit(i, { summary: "s".repeat(7000) }); out.push("ok"); } catch (e) { out.push(e.message); } }
      console.log(JSON.stringify(out));`,
      small,
    );
    expect(r.error).toBeUndefined();
    expect(r.emits.map((e) => e.event)).toEqual([0, 1]);
    expect(JSON.parse(r.logs[0]?.msg ?? "[]")).toEqual([
      "ok",
      "ok",
      "$emit: a run may emit at most 16384 bytes (events and metadata as JSON)",
    ]);
  });
});

describe("depth of emitted and stored values", () => {
  it("refuses an event nested deeper than 256 levels inside the run and keeps the other emits", async () => {
    const r = await run(`const deep = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };
      this.$emit("before");
      try { this.$emit(deep(5000)); } catch (e) { this.$emit(e.message); }
      this.$emit(deep(255), { summary: "at the limit" });
      try { this.db.set("deep", deep(5000)); } catch (e) { this.$emit(e.message); }
      this.$emit(deep(300));`);
    expect(r.error?.msg).toBe("$emit: the event nests deeper than 256 levels");
    expect(r.emits.map((e) => (typeof e.event === "string" ? e.event : e.meta.summary))).toEqual([
      "before",
      "$emit: the event nests deeper than 256 levels",
      "at the limit",
      "db.set: the value nests deeper than 256 levels",
    ]);
    expect(r.dbChanged).toBe(false);
  });
});
