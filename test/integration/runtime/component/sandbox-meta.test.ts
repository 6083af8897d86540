import { afterAll, describe, expect, it } from "vitest";
import { ValidationError } from "../../../../src/domain/errors.js";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { ComponentCompiler } from "../../../../src/runtime/component/compiler.js";
import { createMetaSandbox, loadComponent, readComponentMeta } from "../../../../src/runtime/component/meta.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";

// Metadata of the conformance fixtures (copied from /work/shared/conformance/fixtures.mjs).

const TIMER = `module.exports = {
  key: "conformance-timer",
  name: "Conformance Timer",
  version: "0.1.0",
  description: "Counts ticks",
  props: {
    db: "$.service.db",
    timer: { type: "$.interface.timer", default: { intervalSeconds: 60 } },
    greeting: { type: "string", label: "Greeting", description: "What to say", optional: true, default: "hello" },
  },
  async run(event) {
    const n = (this.db.get("n") || 0) + 1;
    this.db.set("n", n);
    this.$emit({ greeting: this.greeting, n, interval: event.interval_seconds }, { summary: "tick " + n, id: String(n) });
  },
};
`;

const HTTP_ESM = `export default {
  key: "conformance-http",
  name: "Conformance HTTP",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    console.log("got", event.method, event.path);
    this.$emit({ method: event.method, path: event.path, query: event.query, body: event.body }, { summary: event.method + " " + event.path });
  },
};
`;

const ECHO = `module.exports = {
  name: "Conformance Echo",
  version: "0.0.2",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    this.http.respond({ status: "201", headers: { "x-echo": "yes" }, body: { echoed: event.body } });
    this.$emit(event.body);
  },
};
`;

const REQUIRED_PROP = `module.exports = {
  name: "Needs Url",
  version: "1.0.0",
  props: {
    url: { type: "string", label: "Feed URL" },
    count: { type: "integer", optional: true, default: 3 },
  },
  async run() {},
};
`;

const opts = { compiler: new ComponentCompiler({ allowedPackages: ["@pipedream/platform"] }), sandbox: createMetaSandbox(32) };
afterAll(() => opts.sandbox.close());

describe("loadComponent", () => {
  it("reads the timer fixture", async () => {
    const { meta, compiledCode } = await loadComponent(TIMER, opts);
    expect(compiledCode).toContain("conformance-timer");
    expect(meta).toEqual({
      key: "conformance-timer",
      name: "Conformance Timer",
      version: "0.1.0",
      description: "Counts ticks",
      dedupe: null,
      props: [
        { name: "db", type: "$.service.db" },
        { name: "timer", type: "$.interface.timer", default: { intervalSeconds: 60 } },
        { name: "greeting", type: "string", label: "Greeting", description: "What to say", optional: true, default: "hello" },
      ],
      hooks: [],
      hasRun: true,
    });
  });

  it("reads the ESM fixture with a shorthand HTTP prop", async () => {
    const { meta } = await loadComponent(HTTP_ESM, opts);
    expect(meta).toMatchObject({
      key: "conformance-http",
      name: "Conformance HTTP",
      version: "0.0.1",
      props: [{ name: "http", type: "$.interface.http" }],
    });
  });

  it("reads the echo fixture with customResponse", async () => {
    const { meta } = await loadComponent(ECHO, opts);
    expect(meta).toMatchObject({
      key: null,
      name: "Conformance Echo",
      version: "0.0.2",
      props: [{ name: "http", type: "$.interface.http", customResponse: true }],
    });
  });

  it("reads the required-prop fixture", async () => {
    const { meta } = await loadComponent(REQUIRED_PROP, opts);
    expect(meta.name).toBe("Needs Url");
    expect(meta.props).toEqual([
      { name: "url", type: "string", label: "Feed URL" },
      { name: "count", type: "integer", optional: true, default: 3 },
    ]);
  });

  it("reads hooks, dedupe, remote options and a name from the key", async () => {
    const { meta } = await loadComponent(
      `module.exports = { key: "only-key", dedupe: "greatest", hooks: { deploy() {}, activate() {}, other() {} },
        props: { repo: { type: "string", async options() { return []; } } }, async run() {} };`,
      opts,
    );
    expect(meta).toMatchObject({ key: "only-key", name: "only-key", version: "0.0.1", dedupe: "greatest", hooks: ["deploy", "activate"] });
    expect(meta.props).toEqual([{ name: "repo", type: "string", remoteOptions: true }]);
  });

  it("lets top-level code use console and process.env but not the network", async () => {
    await expect(
      loadComponent(`console.log(process.env.PD_COMPONENT); module.exports = { name: "c", async run() {} };`, opts),
    ).resolves.toBeDefined();
    await expect(loadComponent(`fetch("https://x"); module.exports = { name: "c", async run() {} };`, opts)).rejects.toThrowError(
      /fetch is not available while the component is loaded/,
    );
  });

  it("survives cyclic and deep props", async () => {
    const { meta } = await loadComponent(
      `const o = { type: "object" }; o.default = { self: o }; module.exports = { name: "cyc", props: { o }, async run() {} };`,
      opts,
    );
    expect(meta.props[0]).toEqual({ name: "o", type: "object", default: { self: null } });
  });

  it.each([
    ["this is not javascript {", /component\.js:1:6/],
    ["module.exports = 42;", /module\.exports or export default is number/],
    ["while(true){}", /did not finish loading within 1000 ms/],
    ["throw new Error('x')", /threw while loading: x/],
    ["module.exports = { name: 'no run' };", /no run\(\) method/],
    ["", /empty/],
    ["const fs = require('fs'); module.exports = { name: 'x', async run() {} };", /package fs is not allowed/],
    ["module.exports = { name: 'x', dedupe: 'often', async run() {} };", /dedupe/],
    ["const a = []; while (true) a.push(new Array(1e6).fill(1));", /more than 32 MB|did not finish/],
  ])("rejects %j quickly with the reason", async (code, reason) => {
    const started = Date.now();
    const err = await loadComponent(code, opts).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).status).toBe(400);
    expect((err as ValidationError).message).toMatch(reason);
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it.each([
    [
      "50 props sharing one 4 MB string",
      `const s = "x".repeat(4e6), props = {}; for (let i = 0; i < 50; i++) props["p" + i] = { type: "string", description: s };`,
      /metadata is too large: it holds a string of 4000000 characters \(at most 65536\)/,
    ],
    [
      "50 props sharing one 10 KB string",
      `const s = "x".repeat(1e4), props = {}; for (let i = 0; i < 50; i++) props["p" + i] = { type: "string", description: s };`,
      /metadata is too large: its strings add up to more than 262144 characters/,
    ],
    [
      "a prop whose name is 100 KB",
      `const props = { ["k".repeat(1e5)]: "string" };`,
      /metadata is too large: it holds a string of 100000 characters/,
    ],
  ])("refuses metadata that would be amplified when copied out: %s", async (_label, setup, reason) => {
    // 233 bytes of code used to become a 214 MB component record, blocking the API for 16 s.
    const started = Date.now();
    const err = await loadComponent(`${setup} module.exports = { name: "amp", props, async run() {} };`, opts).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toMatch(reason);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("keeps working after bad code", async () => {
    await expect(loadComponent(TIMER, opts)).resolves.toBeDefined();
  });
});

describe("readComponentMeta", () => {
  it("reads compiled code in the caller's sandbox", async () => {
    const compiled = await compileComponent(HTTP_ESM, { allowedPackages: [] });
    const sandbox = new Sandbox({ memoryMb: 32, timeoutMs: 1000 });
    try {
      expect((await readComponentMeta(compiled, { sandbox })).name).toBe("Conformance HTTP");
      expect((await readComponentMeta(compiled, { sandbox, timeoutMs: 500 })).key).toBe("conformance-http");
    } finally {
      sandbox.close();
    }
  });
});
