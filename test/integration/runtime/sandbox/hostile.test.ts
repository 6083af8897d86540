import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { type Receiver, startReceiver, waitFor } from "../../../helpers/receiver.js";
import { type Json, expectStatus, createSource, eventsNewestFirst as events, events as oldestFirst } from "../support.js";

/**
 * Hostile component code through the whole daemon (SPEC §5 "Sandbox"): runaway loops, memory
 * hogs, runs that never settle and escape attempts are stopped, reported on $errors, and other
 * users keep being served. The sandbox's own behaviour is covered in sandbox-hostile.test.ts;
 * this file checks what the daemon makes of it.
 */

const TIMEOUT_MS = 500;

const httpSource = (name: string, run: string, custom = false) => `module.exports = {
  name: "Hostile ${name}",
  version: "0.0.1",
  props: { http: ${custom ? '{ type: "$.interface.http", customResponse: true }' : '"$.interface.http"'} },
  async run(event) { ${run} },
};
`;

const LOOP = "while (true) {}";
const HOG = "const a = []; while (true) a.push(new Array(1e6).fill(1));";
const NEVER = "await new Promise(() => {});";

/** A well-behaved source, as another user would have. */
const HEALTHY = `export default {
  name: "Healthy",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit({ ok: event.body }); },
};
`;

let td: TestDaemon;
let rx: Receiver;
const anon = () => client(td.url);

beforeAll(async () => {
  td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: String(TIMEOUT_MS), SANDBOX_MEMORY_MB: "16" });
  rx = await startReceiver();
});

afterAll(async () => {
  await rx?.close();
  await td?.close();
});

async function firstError(api: Client, sourceId: string): Promise<Json> {
  const [e] = await waitFor(
    async () => {
      const d = await events(api, sourceId, "$errors");
      return d.length > 0 ? d : undefined;
    },
    { what: `an $errors record of ${sourceId}` },
  );
  return e.event;
}

/**
 * Another user's HTTP source subscribed to a webhook: returns a function that sends one request
 * and resolves when the receiver got the delivery.
 */
async function bystander(path: string): Promise<(n: number) => Promise<void>> {
  const u = await td.createUser();
  const s = await createSource(u.api, HEALTHY);
  const hook = await u.api.post("/v1/webhooks", { query: { url: rx.url(path) } });
  expectStatus(hook, 200);
  expectStatus(await u.api.post("/v1/subscriptions", { query: { emitter_id: s.id, listener_id: hook.body.data.id } }), 200);
  return async (n) => {
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: { n } }), 200);
    await rx.waitFor((r) => r.to(path).some((q) => (q.json as Json)?.ok?.n === n), { what: `delivery ${n} to ${path}` });
  };
}

describe("runaway runs", () => {
  it("stops an infinite loop at the time limit and records TIMEOUT, while other users are served", async () => {
    const u = await td.createUser();
    const loop = await createSource(u.api, httpSource("Loop", LOOP, true));
    const deliver = await bystander("/loop-bystander");
    const meUser = await td.createUser();

    // The loop holds one isolate for the whole time limit; meanwhile the API and other users'
    // sources answer. Completion order shows it: they finish before the looping request does.
    const finished: string[] = [];
    const looping = anon()
      .post(loop.configured_props.http.endpoint_url, { json: { spin: true } })
      .then((r) => {
        finished.push("loop");
        return r;
      });
    await waitFor(async () => {
      const r = await meUser.api.get("/v1/users/me");
      return r.status === 200;
    });
    finished.push("me");
    await deliver(1);
    finished.push("delivery");
    const res = await looping;
    expect(finished[0]).toBe("me");
    expectStatus(res, 504);

    const err = await firstError(u.api, loop.id);
    expect(err.error.code).toBe("TIMEOUT");
    expect(err.error.msg).toContain(`${TIMEOUT_MS} ms`);
    expect(err.original_event.body).toEqual({ spin: true });
    await deliver(2);
  });

  it("stops a memory hog with MEMORY_LIMIT and answers 502 to its custom response", async () => {
    // A daemon whose time limit the hog cannot reach first: with a busy CPU, filling 16 MB can
    // take longer than this file's 500 ms, and TIMEOUT would then be the right verdict.
    const roomy = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "10000", SANDBOX_MEMORY_MB: "16" });
    try {
      const u = await roomy.createUser();
      const http = client(roomy.url);
      const queued = await createSource(u.api, httpSource("Hog", HOG));
      expectStatus(await http.post(queued.configured_props.http.endpoint_url, { json: {} }), 200);
      const err = await firstError(u.api, queued.id);
      expect(err.error.code).toBe("MEMORY_LIMIT");
      expect(err.error.msg).toContain("16 MB");

      const inline = await createSource(u.api, httpSource("Hog inline", HOG, true));
      const res = await http.post(inline.configured_props.http.endpoint_url, { json: {} });
      expectStatus(res, 502);
      // The anonymous caller gets no detail; the source's owner reads it on $errors.
      expect(res.body).toEqual({ error: "source run failed", code: "source_run_failed" });
      expect((await firstError(u.api, inline.id)).error.code).toBe("MEMORY_LIMIT");
    } finally {
      await roomy.close();
    }
  });

  it("stops a run whose promise never settles, queued or inline", async () => {
    const u = await td.createUser();
    const queued = await createSource(u.api, httpSource("Never", NEVER));
    expectStatus(await anon().post(queued.configured_props.http.endpoint_url, { json: {} }), 200);
    expect((await firstError(u.api, queued.id)).error.code).toBe("TIMEOUT");
    const inline = await createSource(u.api, httpSource("Never inline", NEVER, true));
    expectStatus(await anon().post(inline.configured_props.http.endpoint_url, { json: {} }), 504);
  });

  it("fails a looping deploy hook with 400 and saves nothing", async () => {
    const u = await td.createUser();
    const code = `module.exports = { name: "Hostile hook", version: "0.0.1", props: {}, hooks: { async deploy() { for (;;) {} } }, async run() {} };`;
    const res = await u.api.post("/v1/sources", { json: { component_code: code } });
    expectStatus(res, 400);
    expect(res.body.code).toBe("hook_failed");
    expect(res.body.error).toMatch(/TIMEOUT/);
    expect((await u.api.get("/v1/users/me/sources")).body.data).toEqual([]);
  });

  it("keeps serving every user after many hostile runs at once", async () => {
    const u = await td.createUser();
    const sources = await Promise.all([LOOP, HOG, NEVER].map((run, i) => createSource(u.api, httpSource(`Mix ${i}`, run))));
    const deliver = await bystander("/mix-bystander");
    for (const s of sources) {
      for (let i = 0; i < 3; i++) expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: { i } }), 200);
    }
    await deliver(1);
    // Every hostile run ends and is reported.
    for (const s of sources) {
      await waitFor(async () => (await events(u.api, s.id, "$errors")).length === 3, { timeoutMs: 15_000, what: `3 errors of ${s.name}` });
    }
    // The hostile user's own healthy source works too: the isolates were replaced.
    const healthy = await createSource(u.api, HEALTHY);
    expectStatus(await anon().post(healthy.configured_props.http.endpoint_url, { json: { after: true } }), 200);
    await waitFor(async () => (await events(u.api, healthy.id)).length === 1, { what: "the healthy run" });
    await deliver(2);
    expectStatus(await u.api.get("/v1/users/me"), 200);
    expectStatus(await anon().get("/healthz"), 200);
  });
});

describe("escape attempts", () => {
  it("reach only the sandbox's own process object, never the daemon's", async () => {
    const u = await td.createUser();
    const code = httpSource(
      "Escape",
      `const viaThis = this.constructor.constructor("return process")();
      const viaFn = (function () {}).constructor("return this")();
      const viaEval = (0, eval)("typeof require + '|' + typeof module + '|' + typeof Buffer");
      this.$emit({
        same: viaThis === process,
        keys: Object.keys(viaThis),
        env: viaThis.env,
        binding: typeof viaThis.binding,
        versions: typeof viaThis.versions,
        mainModule: typeof viaThis.mainModule,
        exit: typeof viaThis.exit,
        globalProcessKeys: Object.keys(viaFn.process),
        evalSees: viaEval,
      });`,
    );
    const s = await createSource(u.api, code);
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: {} }), 200);
    const [e] = await waitFor(async () => {
      const d = await events(u.api, s.id);
      return d.length > 0 ? d : undefined;
    });
    expect(e.event).toEqual({
      same: true,
      keys: ["env"],
      env: { PD_COMPONENT: s.id },
      binding: "undefined",
      versions: "undefined",
      mainModule: "undefined",
      exit: "undefined",
      globalProcessKeys: ["env"],
      evalSees: "undefined|undefined|undefined",
    });
  });

  it("refuses require() of Node built-ins inside run with an error the run can catch or that lands on $errors", async () => {
    const u = await td.createUser();
    // A literal name is refused when the code is bundled (the module throws when loaded); a
    // computed one reaches the sandbox's require, which has nothing to give.
    const caught = httpSource(
      "Require caught",
      `const out = {};
      try { out.fs = typeof require("fs").readFileSync; } catch (e) { out.fs = e.message; }
      try { out.cp = typeof require("node:child_process").execSync; } catch (e) { out.cp = e.message; }
      const name = ["n", "e", "t"].join("");
      try { out.computed = typeof require(name).connect; } catch (e) { out.computed = e.message; }
      this.$emit(out);`,
    );
    const s = await createSource(u.api, caught);
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: {} }), 200);
    const [e] = await waitFor(async () => {
      const d = await events(u.api, s.id);
      return d.length > 0 ? d : undefined;
    });
    expect(e.event).toEqual({
      fs: "package fs is not allowed",
      cp: "package node:child_process is not allowed",
      computed: 'require("net") is not available: import allowed packages at the top of the component',
    });

    const uncaught = await createSource(
      u.api,
      httpSource("Require uncaught", `return require("child_process").execSync("id").toString();`),
    );
    expectStatus(await anon().post(uncaught.configured_props.http.endpoint_url, { json: {} }), 200);
    const err = await firstError(u.api, uncaught.id);
    expect(err.error.msg).toBe("package child_process is not allowed");
    expect(await events(u.api, uncaught.id)).toEqual([]);
  });

  it("fails process.binding() as the missing function it is", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, httpSource("Binding", `return process.binding("fs").open("/etc/passwd", 0, 0);`));
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: {} }), 200);
    const err = await firstError(u.api, s.id);
    expect(err.error.code).toBe("TypeError");
    expect(err.error.msg).toMatch(/binding is not a function/);
    // The error's stack names the component's code, not the daemon's files.
    expect(err.error.stack).not.toMatch(/\/work\/|node_modules|src\/runtime/);
  });

  it("refuses a static import or a top-level require of a Node built-in at create time", async () => {
    const u = await td.createUser();
    const imported = `import { readFileSync } from "node:fs";\nexport default { name: "Static import", version: "0.0.1", props: {}, async run() { this.$emit(readFileSync("/etc/passwd", "utf8")); } };`;
    const res = await u.api.post("/v1/sources", { json: { component_code: imported } });
    expectStatus(res, 400);
    expect(res.body.error).toMatch(/node:fs is not allowed/);
    const required = `const fs = require("fs");\nmodule.exports = { name: "Top-level require", version: "0.0.1", props: {}, async run() { this.$emit(fs.readFileSync("/etc/passwd", "utf8")); } };`;
    const res2 = await u.api.post("/v1/sources", { json: { component_code: required } });
    expectStatus(res2, 400);
    expect(res2.body.error).toMatch(/package fs is not allowed/);
    expect((await u.api.get("/v1/users/me/sources")).body.data).toEqual([]);
  });
});

describe("what a run hands to the daemon", () => {
  const DEEP = "const deep = (n) => { let v = 1; for (let i = 0; i < n; i++) v = [v]; return v; };";

  it("refuses an emit nested 5000 deep inside the run, keeping its other emits and its $errors record", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      httpSource(
        "Deep emit",
        `${DEEP}
        this.$emit({ n: 1 });
        try { this.$emit(deep(5000)); } catch (e) { this.$emit({ caught: e.message }); }
        this.$emit({ n: 2 });
        this.$emit(deep(5000));`,
      ),
    );
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: { go: true } }), 200);
    // Before: recording the deep event failed the whole run's job; nothing below was recorded.
    const err = await firstError(u.api, s.id);
    expect(err.error.msg).toBe("$emit: the event nests deeper than 256 levels");
    expect(err.original_event.body).toEqual({ go: true });
    expect((await oldestFirst(u.api, s.id)).map((e: Json) => e.event)).toEqual([
      { n: 1 },
      { caught: "$emit: the event nests deeper than 256 levels" },
      { n: 2 },
    ]);
  });

  it("refuses channel names the API could not list or delete, with the API's rule", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      httpSource(
        "Channels",
        `for (const name of ["bad\\u0001name", "n".repeat(5000)]) {
          try { this.$emit({ refused: name.length }, { name }); } catch (e) { this.$emit({ caught: e.message }); }
        }
        this.$emit({ fine: true }, { name: "fine-channel" });`,
      ),
    );
    expectStatus(await anon().post(s.configured_props.http.endpoint_url, { json: {} }), 200);
    const fine = await waitFor(async () => {
      const d = await events(u.api, s.id, "fine-channel");
      return d.length > 0 ? d : undefined;
    });
    expect(fine.map((e: Json) => e.event)).toEqual([{ fine: true }]);
    expect((await oldestFirst(u.api, s.id)).map((e: Json) => e.event)).toEqual([
      { caught: "$emit: meta.name must not contain control characters" },
      { caught: "$emit: meta.name must be at most 200 characters" },
    ]);
    expect(await events(u.api, s.id, "$errors")).toEqual([]);
  });

  it("passes form fields named constructor, toString and __proto__ as plain data", async () => {
    const u = await td.createUser();
    const body = "constructor=a&toString=b&__proto__=c&hasOwnProperty=d&x=1&x=2";
    const expected = JSON.parse('{"constructor":"a","toString":"b","__proto__":"c","hasOwnProperty":"d","x":["1","2"]}');
    const form = { "content-type": "application/x-www-form-urlencoded" };

    const queued = await createSource(u.api, httpSource("Form", "this.$emit(event.body);"));
    expectStatus(await anon().post(queued.configured_props.http.endpoint_url, { body, headers: form }), 200);
    const [e] = await waitFor(async () => {
      const d = await events(u.api, queued.id);
      return d.length > 0 ? d : undefined;
    });
    expect(e.event).toEqual(expected);

    const inline = await createSource(u.api, httpSource("Form inline", "this.http.respond({ body: event.body });", true));
    const res = await anon().post(inline.configured_props.http.endpoint_url, { body, headers: form });
    expectStatus(res, 200);
    expect(res.body).toEqual(expected);
    expect(await events(u.api, queued.id, "$errors")).toEqual([]);
  });

  it("answers 400, quickly, to a component whose metadata shares one huge string among many props", async () => {
    const u = await td.createUser();
    // 233 bytes of code used to become a 214 MB component record, blocking the API for 16 s.
    const code = `const s = "x".repeat(4e6), props = {};
      for (let i = 0; i < 50; i++) props["p" + i] = { type: "string", description: s };
      module.exports = { name: "Amplified", props, async run() {} };`;
    const started = Date.now();
    const res = await u.api.post("/v1/components", { json: { component_code: code } });
    expectStatus(res, 400);
    expect(res.body.code).toBe("invalid_parameter");
    expect(res.body.error).toMatch(/metadata is too large/);
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe("fair share of the sandbox", () => {
  const FLOOD_TIMEOUT_MS = 2000;
  let flooded: TestDaemon;

  beforeAll(async () => {
    flooded = await startTestDaemon({ SANDBOX_TIMEOUT_MS: String(FLOOD_TIMEOUT_MS) });
  });

  afterAll(async () => {
    await flooded?.close();
  });

  // Custom-response runs happen in the API process. A burst of requests to a looping
  // custom-response component must not hold the isolates that other users' runs need: inline runs
  // have their own pool and are capped per source and per user (the excess answers 429).
  it("runs another user's source promptly while one user floods a looping custom-response endpoint", async () => {
    const http = client(flooded.url);
    const attacker = await flooded.createUser("paid");
    const loop = await createSource(attacker.api, httpSource("Flood", LOOP, true));
    const victim = await flooded.createUser();
    const healthy = await createSource(victim.api, HEALTHY);
    const ran = async (n: number) =>
      waitFor(async () => (await events(victim.api, healthy.id)).length === n, { timeoutMs: 15_000, what: `run ${n} of the victim` });
    // A first run warms the path, so the timed one below measures only waiting for an isolate.
    expectStatus(await http.post(healthy.configured_props.http.endpoint_url, { json: { n: 0 } }), 200);
    await ran(1);

    const flood = Array.from({ length: 20 }, () => http.post(loop.configured_props.http.endpoint_url, { json: {} }));
    // Let the flood take the isolates before the victim's request (nothing observable says when
    // every flooding run holds one; a quarter of the time limit is ample).
    await new Promise((r) => setTimeout(r, FLOOD_TIMEOUT_MS / 4));
    const started = Date.now();
    expectStatus(await http.post(healthy.configured_props.http.endpoint_url, { json: { n: 1 } }), 200);
    await ran(2);
    const waited = Date.now() - started;
    await Promise.all(flood);
    expect(waited, `the victim's run took ${waited} ms`).toBeLessThan(FLOOD_TIMEOUT_MS / 2);
  });
});
