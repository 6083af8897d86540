import { afterAll, describe, expect, it } from "vitest";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";
import type { HostFetch, RunRequest } from "../../../../src/runtime/sandbox/types.js";

/**
 * Long-lived contexts (issue 12, user-isolates.ts): an isolate per user, a context per source and
 * code. Module state persists between runs of one source and code, and nothing else does: not
 * across sources, users, redeploys, evictions or time-outs, and no run sees the previous run's
 * `this`, timers or fetches. Real isolates throughout.
 */

const allowedPackages = ["@pipedream/platform"];
let release: (() => void) | undefined;
const slowFetch: HostFetch = (url) =>
  new Promise((resolve) => {
    // Answers only when the test says so (after the run that asked has ended).
    release = () => resolve({ status: 200, headers: {}, body: url });
  });
const sandbox = new Sandbox({ memoryMb: 32, timeoutMs: 1000 }, { fetch: slowFetch });
afterAll(() => sandbox.close());

async function compiled(code: string): Promise<string> {
  return compileComponent(code, { allowedPackages });
}

function req(compiledCode: string, userId: string, sourceId: string, extra: Partial<RunRequest> = {}): RunRequest {
  return { compiledCode, userId, sourceId, method: "run", props: {}, db: {}, ...extra };
}

/** Runs `fn` with `box`, then closes it. */
async function closing(box: Sandbox, fn: (box: Sandbox) => Promise<void>): Promise<void> {
  try {
    await fn(box);
  } finally {
    box.close();
  }
}

/** Emits `{ok: true}` after computing for `event.spinMs` (a busy loop, no await). */
const SPINS = `module.exports = { name: "spins", async run(event) {
  if (event && event.spinMs) { const end = Date.now() + event.spinMs; while (Date.now() < end) {} }
  this.$emit({ ok: true });
} };`;

async function emitted(box: Sandbox, r: RunRequest): Promise<unknown[]> {
  const result = await box.run(r);
  expect(result.error).toBeUndefined();
  return result.emits.map((e) => e.event);
}

/** Counts its runs in module scope and reports what it can see of other code's traces. */
const COUNTER = `let n = 0;
module.exports = { name: "counter", async run(event) {
  n++;
  if (event && event.mark) {
    globalThis.marked = event.mark;
    Object.prototype.polluted = event.mark;
    Array.prototype.tag = event.mark;
  }
  this.$emit({ n, marked: globalThis.marked ?? null, polluted: ({}).polluted ?? null, tag: [].tag ?? null });
} };`;

describe("module state", () => {
  it("persists between runs of the same source and code", async () => {
    const code = await compiled(COUNTER);
    const ns: unknown[] = [];
    for (let i = 0; i < 3; i++) ns.push(((await emitted(sandbox, req(code, "u_persist", "dc_persist")))[0] as { n: number }).n);
    expect(ns).toEqual([1, 2, 3]);
  });

  it("is never seen by another source of the same user, nor by another user's source", async () => {
    const code = await compiled(COUNTER);
    const a = await emitted(sandbox, req(code, "u_a", "dc_a1", { event: { mark: "a1" } }));
    expect(a[0]).toEqual({ n: 1, marked: "a1", polluted: "a1", tag: "a1" });
    // The same code, another source of the same user: its own context, clean globals and prototypes.
    expect((await emitted(sandbox, req(code, "u_a", "dc_a2")))[0]).toEqual({ n: 1, marked: null, polluted: null, tag: null });
    // The same code and source id, another user: another isolate.
    expect((await emitted(sandbox, req(code, "u_b", "dc_a1")))[0]).toEqual({ n: 1, marked: null, polluted: null, tag: null });
    // The first source kept its own.
    expect((await emitted(sandbox, req(code, "u_a", "dc_a1")))[0]).toEqual({ n: 2, marked: "a1", polluted: "a1", tag: "a1" });
  });

  it("starts over after a redeploy (new code) and after eviction", async () => {
    const code = await compiled(COUNTER);
    const redeployed = await compiled(COUNTER.replace('name: "counter"', 'name: "counter v2"'));
    expect(((await emitted(sandbox, req(code, "u_redeploy", "dc_r")))[0] as { n: number }).n).toBe(1);
    expect(((await emitted(sandbox, req(code, "u_redeploy", "dc_r")))[0] as { n: number }).n).toBe(2);
    expect(((await emitted(sandbox, req(redeployed, "u_redeploy", "dc_r")))[0] as { n: number }).n).toBe(1);

    // One context per isolate at most: a second source evicts the first one's context.
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 1000 }, { maxContextsPerIsolate: 1 }), async (tight) => {
      expect(((await emitted(tight, req(code, "u_evict", "dc_e1")))[0] as { n: number }).n).toBe(1);
      expect(((await emitted(tight, req(code, "u_evict", "dc_e1")))[0] as { n: number }).n).toBe(2);
      expect(tight.contextCount).toBe(1);
      await emitted(tight, req(code, "u_evict", "dc_e2"));
      expect(tight.contextCount).toBe(1);
      expect(((await emitted(tight, req(code, "u_evict", "dc_e1")))[0] as { n: number }).n).toBe(1);
    });
  });

  it("releases every context it evicts: many sources through a small cap leave the isolate's memory alone", async () => {
    // 64 MB, at most 4 contexts: 100 sources, each holding 1 MB in module scope. Leaked contexts
    // would keep their megabyte each, and the isolate would hit its memory limit long before the
    // last source; the headroom over the ~5 MB that 4 live contexts hold leaves V8 time to collect
    // released ones on a loaded machine (at 32 MB a late collection failed a run once).
    await closing(new Sandbox({ memoryMb: 64, timeoutMs: 5000 }, { maxContexts: 4 }), async (small) => {
      const code = await compiled(
        `const keep = new Array(128 * 1024).fill(0.5); module.exports = { name: "m", async run() { this.$emit(keep.length); } };`,
      );
      const failures: string[] = [];
      for (let i = 0; i < 100; i++) {
        const r = await small.run(req(code, "u_mem", `dc_mem${i}`));
        if (r.error) failures.push(`${i}: ${r.error.code}`);
      }
      expect(failures).toEqual([]);
      expect(small.contextCount).toBeLessThanOrEqual(4);
    });
  }, 60_000);
});

describe("per-run state", () => {
  it("gives each run its own this: a this kept from an earlier run refuses to act", async () => {
    const code = await compiled(`let kept;
      module.exports = { name: "kept", props: { db: "$.service.db" }, async run(event) {
        const out = { sameThis: kept === this, sawProp: this.greeting ?? null };
        if (kept) {
          for (const [what, f] of [["emit", () => kept.$emit("stale")], ["db", () => kept.db.set("k", 1)]]) {
            try { f(); out[what] = "worked"; } catch (e) { out[what] = e.message; }
          }
        }
        kept = this;
        this.$emit(out);
      } };`);
    const first = await emitted(sandbox, req(code, "u_this", "dc_this", { props: { greeting: "hi" } }));
    expect(first).toEqual([{ sameThis: false, sawProp: "hi" }]);
    const second = await sandbox.run(req(code, "u_this", "dc_this", { props: {} }));
    expect(second.emits.map((e) => e.event)).toEqual([
      {
        sameThis: false,
        sawProp: null,
        emit: "$emit: the run this belongs to has ended",
        db: "db: the run this belongs to has ended",
      },
    ]);
    expect(second.dbChanged).toBe(false);
  });

  it("never fires the previous run's timers nor settles its fetches into the next run", async () => {
    const code = await compiled(`let runs = 0;
      module.exports = { name: "leftovers", async run(event) {
        runs++;
        const me = runs;
        if (me === 1) {
          // Left behind: a timer due during the second run, and a fetch answered during it.
          setTimeout(() => { console.log("timer of run 1"); this.$emit("timer of run 1"); }, 150);
          fetch("http://example.test/one").then(() => console.log("fetch of run 1"), () => {});
          return;
        }
        await new Promise((r) => setTimeout(r, 400));
        this.$emit("run " + me + " done");
      } };`);
    const first = await sandbox.run(req(code, "u_left", "dc_left"));
    expect(first.error).toBeUndefined();
    const second = sandbox.run(req(code, "u_left", "dc_left"));
    await new Promise((r) => setTimeout(r, 50));
    release?.(); // run 1's fetch answers now, during run 2
    const r2 = await second;
    expect(r2.error).toBeUndefined();
    expect(r2.emits.map((e) => e.event)).toEqual(["run 2 done"]);
    expect(r2.logs).toEqual([]);
  });

  it("passes console, emits and db writes back with the run's result, within the run's limits", async () => {
    const code = await compiled(`module.exports = { name: "out", props: { db: "$.service.db" }, async run() {
      console.log("a", { b: 1 });
      this.$emit({ x: 1 }, { id: "i1", summary: "s" });
      this.db.set("n", (this.db.get("n") ?? 0) + 1);
      this.db.set("gone", undefined);
      try { this.$emit(1, { name: "bad\\u0001name" }); } catch (e) { console.error(e.message); }
    } };`);
    const r = await sandbox.run(req(code, "u_out", "dc_out", { db: { n: 41, gone: true } }));
    expect(r.error).toBeUndefined();
    expect(r.emits).toEqual([{ event: { x: 1 }, meta: { id: "i1", summary: "s" } }]);
    expect(r.logs.map((l) => [l.k, l.msg])).toEqual([
      ["console.log", "a { b: 1 }"],
      ["console.error", "$emit: meta.name must not contain control characters"],
    ]);
    expect(r.dbChanged).toBe(true);
    expect(r.db).toEqual({ n: 42 });
  });
});

describe("warm runs on the sandbox's thread", () => {
  it("answers a warm run by synchronous entry, and goes on asynchronously when it awaits a fetch or a timer", async () => {
    await closing(
      new Sandbox({ memoryMb: 32, timeoutMs: 5000 }, { fetch: async (url) => ({ status: 200, headers: {}, body: `got ${url}` }) }),
      async (box) => {
        const code = await compiled(`let n = 0;
        module.exports = { name: "waits", async run(event) {
          n++;
          if (event && event.fetch) this.$emit({ n, body: await (await fetch("https://example.com/x")).text() });
          else if (event && event.timer) { await new Promise((r) => setTimeout(r, 20)); this.$emit({ n, timer: true }); }
          else this.$emit({ n });
        } };`);
        // The first run evaluates the module (async entry); the next ones are warm.
        expect(await emitted(box, req(code, "u_thread", "dc_thread"))).toEqual([{ n: 1 }]);
        const before = box.threadRuns.entered;
        expect(await emitted(box, req(code, "u_thread", "dc_thread"))).toEqual([{ n: 2 }]);
        expect(box.threadRuns.entered).toBe(before + 1);
        expect(await emitted(box, req(code, "u_thread", "dc_thread", { event: { fetch: true } }))).toEqual([
          { n: 3, body: "got https://example.com/x" },
        ]);
        expect(await emitted(box, req(code, "u_thread", "dc_thread", { event: { timer: true } }))).toEqual([{ n: 4, timer: true }]);
        expect(await emitted(box, req(code, "u_thread", "dc_thread"))).toEqual([{ n: 5 }]);
        expect(box.threadRuns).toEqual({ entered: before + 4, sliceSpent: 0 });
      },
    );
  });

  it("gives a warm run that computes past its slice its whole time limit, in a fresh context, and keeps its source off the thread", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 20_000 }), async (box) => {
      const code = await compiled(`let n = 0;
        module.exports = { name: "spins", async run(event) {
          n++;
          this.$emit({ n });
          if (event && event.spinMs) { const end = Date.now() + event.spinMs; while (Date.now() < end) {} }
        } };`);
      expect(await emitted(box, req(code, "u_spin", "dc_spin"))).toEqual([{ n: 1 }]);
      // 300 ms of computing, six times the slice: the run succeeds, started over in a fresh context.
      const spun = await box.run(req(code, "u_spin", "dc_spin", { event: { spinMs: 300 } }));
      expect(spun.error).toBeUndefined();
      expect(spun.emits.map((e) => e.event)).toEqual([{ n: 1 }]);
      expect(spun.durationMs).toBeGreaterThanOrEqual(300);
      expect(box.threadRuns.sliceSpent).toBe(1);
      // That context stays warm for the source's next runs, entered asynchronously from now on.
      const entered = box.threadRuns.entered;
      expect(await emitted(box, req(code, "u_spin", "dc_spin"))).toEqual([{ n: 2 }]);
      expect(box.threadRuns.entered).toBe(entered);
      // Another source of the same user still takes the thread.
      expect(await emitted(box, req(code, "u_spin", "dc_spin2"))).toEqual([{ n: 1 }]);
      expect(await emitted(box, req(code, "u_spin", "dc_spin2"))).toEqual([{ n: 2 }]);
      expect(box.threadRuns.entered).toBe(entered + 1);
    });
  });

  it("never enters a user's run on the thread while another run of that user computes on the async path: other users are not held", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 20_000 }), async (box) => {
      const code = await compiled(SPINS);
      for (const [user, source] of [
        ["u_busy", "dc_fast"],
        ["u_other", "dc_other"],
      ]) {
        await emitted(box, req(code, user as string, source as string));
        await emitted(box, req(code, user as string, source as string));
      }
      const finished: string[] = [];
      // A first run (the async path: a new context) that computes for 1.5 s on isolated-vm's pool.
      const slow = box.run(req(code, "u_busy", "dc_slow", { event: { spinMs: 1500 } })).then((r) => {
        finished.push("slow");
        return r;
      });
      await new Promise((r) => setTimeout(r, 150));
      // A warm run of the same user: entered synchronously, it would hold this thread until the
      // slow run lets go of the isolate, and the next user's run could not even start.
      const sameUser = box.run(req(code, "u_busy", "dc_fast")).then((r) => {
        finished.push("same user");
        return r;
      });
      const other = box.run(req(code, "u_other", "dc_other")).then((r) => {
        finished.push("other user");
        return r;
      });
      for (const r of await Promise.all([slow, sameUser, other])) expect(r.error).toBeUndefined();
      expect(finished[0]).toBe("other user");
      expect(finished).toContain("same user");
    });
  });

  it("answers an HTTP request once when a warm run that responded computes past its slice and starts over", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 20_000 }), async (box) => {
      const code = await compiled(`let n = 0;
        module.exports = { name: "responds", props: { http: { type: "$.interface.http", customResponse: true } }, async run(event) {
          n++;
          this.http.respond({ status: 200, body: "attempt " + n });
          if (event && event.spinMs) { const end = Date.now() + event.spinMs; while (Date.now() < end) {} }
          this.$emit({ n });
        } };`);
      const answers: string[] = [];
      const run = (event: unknown) =>
        box.run(req(code, "u_inline", "dc_inline", { event, onRespond: (r) => answers.push(String(r.body)) }));
      expect((await run({})).emits.map((e) => e.event)).toEqual([{ n: 1 }]);
      const entered = box.threadRuns.entered;
      const warm = await run({});
      expect(warm.responded).toBe(true);
      expect(box.threadRuns.entered).toBe(entered + 1);
      // Responds at once (the warm context's third run), then computes for 300 ms: stopped at its
      // slice and started over in a fresh context, whose own response is not sent again.
      const spun = await run({ spinMs: 300 });
      expect(spun.error).toBeUndefined();
      expect(spun.responded).toBe(true);
      expect(spun.emits.map((e) => e.event)).toEqual([{ n: 1 }]);
      expect(box.threadRuns.sliceSpent).toBe(1);
      expect(answers).toEqual(["attempt 1", "attempt 2", "attempt 3"]);
    });
  });

  it("takes a user's runs off the thread for good once three of its sources outlasted their slice", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 20_000 }), async (box) => {
      const code = await compiled(SPINS);
      for (const source of ["dc_s1", "dc_s2", "dc_s3"]) {
        await emitted(box, req(code, "u_strikes", source));
        expect(await emitted(box, req(code, "u_strikes", source, { event: { spinMs: 120 } }))).toEqual([{ ok: true }]);
      }
      expect(box.threadRuns.sliceSpent).toBe(3);
      await emitted(box, req(code, "u_strikes", "dc_s4"));
      const entered = box.threadRuns.entered;
      expect(await emitted(box, req(code, "u_strikes", "dc_s4", { event: { spinMs: 120 } }))).toEqual([{ ok: true }]);
      expect(box.threadRuns).toEqual({ entered, sliceSpent: 3 });
      // Another user is not affected.
      await emitted(box, req(code, "u_clean", "dc_c"));
      await emitted(box, req(code, "u_clean", "dc_c"));
      expect(box.threadRuns.entered).toBe(entered + 1);
    });
  });
});

describe("containment", () => {
  it("discards a timed-out run's context, keeps what it did, and leaves other users alone", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 300 }), async (box) => {
      const code = await compiled(`let n = 0;
        module.exports = { name: "loop", async run(event) {
          n++;
          this.$emit({ n });
          if (event && event.loop) while (true) {}
        } };`);
      const other = await compiled(COUNTER);
      expect(await emitted(box, req(other, "u_bystander", "dc_by"))).toHaveLength(1);
      expect(await emitted(box, req(code, "u_loop", "dc_loop"))).toEqual([{ n: 1 }]);
      const looped = await box.run(req(code, "u_loop", "dc_loop", { event: { loop: true } }));
      expect(looped.error?.code).toBe("TIMEOUT");
      // The warm run outlasted its slice on the sandbox's thread and started over in a fresh
      // context (the module evaluated again), where it ran into the time limit: what that attempt
      // emitted is kept, the stopped attempt left nothing.
      expect(looped.emits.map((e) => e.event)).toEqual([{ n: 1 }]);
      expect(box.threadRuns.sliceSpent).toBe(1);
      // A fresh context again: the module starts over.
      expect(await emitted(box, req(code, "u_loop", "dc_loop"))).toEqual([{ n: 1 }]);
      // The other user's context was not touched.
      expect(((await emitted(box, req(other, "u_bystander", "dc_by")))[0] as { n: number }).n).toBe(2);
    });
  });

  it("discards the context of a run that timed out waiting, and of a loop in a timer callback", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 300 }), async (box) => {
      const code = await compiled(`let n = 0;
        module.exports = { name: "wait", async run(event) {
          n++;
          this.$emit({ n });
          if (event === "wait") await new Promise(() => {});
          if (event === "timer") await new Promise(() => setTimeout(() => { while (true) {} }, 10));
        } };`);
      expect(await emitted(box, req(code, "u_wait", "dc_wait"))).toEqual([{ n: 1 }]);
      expect(await emitted(box, req(code, "u_wait", "dc_wait"))).toEqual([{ n: 2 }]);
      const waited = await box.run(req(code, "u_wait", "dc_wait", { event: "wait" }));
      expect(waited.error?.code).toBe("TIMEOUT");
      expect(waited.emits.map((e) => e.event)).toEqual([{ n: 3 }]);
      expect(await emitted(box, req(code, "u_wait", "dc_wait"))).toEqual([{ n: 1 }]);
      const looped = await box.run(req(code, "u_wait", "dc_wait", { event: "timer" }));
      expect(looped.error?.code).toBe("TIMEOUT");
      expect(await emitted(box, req(code, "u_wait", "dc_wait"))).toEqual([{ n: 1 }]);
    });
  });

  it("costs a memory hog only its own user's isolate", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 10_000 }), async (box) => {
      const counter = await compiled(COUNTER);
      const hog = await compiled(
        `module.exports = { name: "hog", async run() { const a = []; while (true) a.push("x".repeat(1000) + a.length); } };`,
      );
      await emitted(box, req(counter, "u_victim", "dc_v"));
      await emitted(box, req(counter, "u_hog", "dc_h"));
      expect((await box.run(req(hog, "u_hog", "dc_hog"))).error?.code).toBe("MEMORY_LIMIT");
      // The hog's user lost their isolate (their other source starts over); the other user did not.
      expect(((await emitted(box, req(counter, "u_hog", "dc_h")))[0] as { n: number }).n).toBe(1);
      expect(((await emitted(box, req(counter, "u_victim", "dc_v")))[0] as { n: number }).n).toBe(2);
    });
  }, 30_000);
});

describe("containment on the thread", () => {
  it("costs a warm run's memory hog only its own user's isolate, and the prelude's built-ins stay the guest's", async () => {
    await closing(new Sandbox({ memoryMb: 32, timeoutMs: 10_000 }), async (box) => {
      const counter = await compiled(COUNTER);
      const code = await compiled(`module.exports = { name: "hog later", async run(event) {
          if (event && event.hog) { const a = []; while (true) a.push("x".repeat(1000) + a.length); }
          this.$emit({ ok: true });
        } };`);
      await emitted(box, req(counter, "u_victim2", "dc_v"));
      await emitted(box, req(code, "u_hog2", "dc_h"));
      const entered = box.threadRuns.entered;
      expect((await box.run(req(code, "u_hog2", "dc_h", { event: { hog: true } }))).error?.code).toBe("MEMORY_LIMIT");
      expect(box.threadRuns.entered).toBe(entered + 1);
      // The hog's user starts over in a new isolate; the other user's module state is intact.
      expect(await emitted(box, req(code, "u_hog2", "dc_h"))).toEqual([{ ok: true }]);
      expect(((await emitted(box, req(counter, "u_victim2", "dc_v")))[0] as { n: number }).n).toBe(2);
    });
  }, 30_000);
});

describe("the prelude", () => {
  it("keeps working for the next runs when a component replaces the built-ins it uses", async () => {
    const code = await compiled(`let runs = 0;
      module.exports = { name: "tamper", props: { db: "$.service.db" }, methods: { m() { return "m"; } }, async run() {
        runs++;
        if (runs === 1) {
          Object.keys = () => [];
          Object.assign = () => ({});
          Object.freeze = (o) => null;
          Array.prototype.push = function () { return 0; };
          Array.isArray = () => false;
          Function.prototype.bind = function () { return () => "hijacked"; };
          Promise.prototype.then = function () { throw new Error("hijacked then"); };
          JSON.stringify = () => "{}";
          Map.prototype.get = () => undefined;
          Map.prototype.set = function () { return this; };
          Date.now = () => 0;
          globalThis.Promise = function () { throw new Error("hijacked Promise"); };
          globalThis.Error = function () { return { message: "hijacked Error" }; };
        }
        console.log("run", runs);
        this.db.set("runs", runs);
        this.$emit({ runs, m: this.m(), db: this.db.get("runs") });
      } };`);
    const first = await sandbox.run(req(code, "u_tamper", "dc_tamper"));
    expect(first.error).toBeUndefined();
    const second = await sandbox.run(req(code, "u_tamper", "dc_tamper", { db: first.db }));
    expect(second.error).toBeUndefined();
    expect(second.emits.map((e) => e.event)).toEqual([{ runs: 2, m: "m", db: 2 }]);
    expect(second.logs.map((l) => l.msg)).toEqual(["run 2"]);
    expect(second.db).toEqual({ runs: 2 });
  });
});
