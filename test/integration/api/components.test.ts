import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import {
  createComponent,
  createSource,
  expectError,
  expectStatus,
  HTTP_ESM,
  keyedComponent,
  loopbackServer,
  TIMER_CJS,
  TYPED_PROPS,
  uniqueComponent,
} from "./support.js";

/** POST /components, GET /components/{key|id}, the registry, and component_url fetching. */

const FETCH_MAX_BYTES = 8 * 1024;
const FETCH_TIMEOUT_MS = 700;

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon({
    COMPONENT_FETCH_MAX_BYTES: String(FETCH_MAX_BYTES),
    COMPONENT_FETCH_TIMEOUT_MS: String(FETCH_TIMEOUT_MS),
  });
});

afterAll(async () => {
  await td?.close();
});

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

describe("POST /components", () => {
  it("saves CommonJS code and derives its metadata inside the sandbox", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/components", { json: { component_code: TIMER_CJS } });
    expectStatus(res, 200);
    const c = res.body.data;
    expect(c.id).toMatch(/^sc_[A-Za-z0-9]{10,}$/);
    expect(c).toMatchObject({
      key: "api-timer",
      code: TIMER_CJS,
      code_hash: sha256(TIMER_CJS),
      name: "API Timer",
      version: "0.2.0",
      description: "Ticks for the API tests",
      component_url: null,
    });
    expect(Number.isInteger(c.created_at)).toBe(true);
    expect(Math.abs(c.created_at - Date.now() / 1000)).toBeLessThan(60);
    expect(c.updated_at).toBe(c.created_at);
    expect(c.configurable_props).toEqual([
      { name: "db", type: "$.service.db" },
      { name: "timer", type: "$.interface.timer", label: "Every", default: { intervalSeconds: 60 } },
      { name: "greeting", type: "string", label: "Greeting", description: "What to say", default: "hello" },
    ]);
  });

  it("accepts ESM export default, with imports of nothing and shorthand props", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    expect(c).toMatchObject({ key: "api-http", name: "API HTTP", version: "1.0.0", description: null });
    expect(c.configurable_props).toEqual([{ name: "http", type: "$.interface.http" }]);
  });

  it("keeps declaration order and every documented prop field", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, TYPED_PROPS);
    expect(c.configurable_props.map((p: { name: string }) => p.name)).toEqual(["url", "count", "enabled", "mode", "tags", "extra"]);
    expect(c.configurable_props[1]).toEqual({ name: "count", type: "integer", optional: true, min: 1, max: 10 });
    expect(c.configurable_props[3]).toEqual({
      name: "mode",
      type: "string",
      optional: true,
      options: ["fast", { label: "Slow", value: "slow" }],
    });
  });

  it("normalises shorthand props, customResponse, secrets and option functions", async () => {
    const u = await td.createUser();
    const code = `export default {
      name: "Normalised",
      props: {
        http: { type: "$.interface.http", customResponse: true },
        token: "string",
        password: { type: "string", secret: true, label: "Password" },
        channel: { type: "string", async options({ page }) { return ["a", "b"]; } },
        region: { type: "string", options: () => ["eu"], default: "eu" },
        computed: { type: "object", optional: true, default: () => ({}) },
        notHttp: { type: "string", optional: true, customResponse: true },
      },
      async run() {},
    };`;
    const c = await createComponent(u.api, code);
    expect(c.version).toBe("0.0.1");
    expect(c.key).toBeNull();
    expect(c.configurable_props).toEqual([
      { name: "http", type: "$.interface.http", customResponse: true },
      { name: "token", type: "string" },
      { name: "password", type: "string", label: "Password", secret: true },
      { name: "channel", type: "string", remoteOptions: true },
      { name: "region", type: "string", default: "eu", remoteOptions: true },
      { name: "computed", type: "object", optional: true },
      { name: "notHttp", type: "string", optional: true },
    ]);
  });

  it("takes the name from the key, and stringifies a numeric version", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, `module.exports = { key: "only-key", version: 2, async run() {} };`);
    expect(c).toMatchObject({ key: "only-key", name: "only-key", version: "2", configurable_props: [] });
  });

  it("returns the existing component when the same user posts identical code", async () => {
    const u = await td.createUser();
    const code = uniqueComponent();
    const a = await createComponent(u.api, code);
    const b = await createComponent(u.api, code);
    expect(b).toEqual(a);
    // One character more is different code.
    const c = await createComponent(u.api, `${code} `);
    expect(c.id).not.toBe(a.id);
    expect(c.code_hash).toBe(sha256(`${code} `));
  });

  it("agrees on one component when identical code is posted concurrently", async () => {
    const u = await td.createUser();
    const code = uniqueComponent();
    const results = await Promise.all(Array.from({ length: 6 }, () => u.api.post("/v1/components", { json: { component_code: code } })));
    for (const r of results) expectStatus(r, 200);
    expect(new Set(results.map((r) => r.body.data.id)).size).toBe(1);
  });

  it("keeps components per user: the same code gives another user another id", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const ca = await createComponent(a.api, TIMER_CJS);
    const cb = await createComponent(b.api, TIMER_CJS);
    expect(cb.id).not.toBe(ca.id);
    expect(cb.code_hash).toBe(ca.code_hash);
  });

  it("takes component_code from the query string; the JSON body wins over it", async () => {
    const u = await td.createUser();
    const fromQuery = await u.api.post("/v1/components", { query: { component_code: HTTP_ESM } });
    expectStatus(fromQuery, 200);
    expect(fromQuery.body.data.name).toBe("API HTTP");
    const both = await u.api.post("/v1/components", { query: { component_code: HTTP_ESM }, json: { component_code: TIMER_CJS } });
    expectStatus(both, 200);
    expect(both.body.data.name).toBe("API Timer");
  });

  it("applies include and exclude to the component", async () => {
    const u = await td.createUser();
    const inc = await u.api.post("/v1/components", { query: { include: "id,name" }, json: { component_code: HTTP_ESM } });
    expect(Object.keys(inc.body.data).sort()).toEqual(["id", "name"]);
    const exc = await u.api.post("/v1/components", { query: { exclude: "code,configurable_props" }, json: { component_code: HTTP_ESM } });
    expect(exc.body.data.code).toBeUndefined();
    expect(exc.body.data.configurable_props).toBeUndefined();
    expect(exc.body.data.id).toBe(inc.body.data.id);
  });

  it.each([
    ["no parameters", {}],
    ["an empty component_code", { component_code: "" }],
    ["whitespace only", { component_code: "  \n\t " }],
    ["a number as component_code", { component_code: 42 }],
    ["an object as component_code", { component_code: { code: "x" } }],
    ["a null component_code", { component_code: null }],
  ])("answers 400 naming component_code for %s", async (_label, body) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/components", { json: body }), 400, /component_code|component code/);
  });

  it.each([
    ["a syntax error", "this is not javascript {", /component\.js:1/],
    ["an infinite loop at load", "while (true) {}", /within \d+ ms/],
    ["a throw at load", "throw new Error('kaboom at load')", /kaboom at load/],
    ["a number export", "module.exports = 42;", /number/],
    ["a null export", "module.exports = null;", /null/],
    ["an array export", "module.exports = [];", /array/],
    ["a string ESM default", 'export default "component";', /string/],
    ["no run method", 'module.exports = { name: "no run" };', /run/],
    ["neither name nor key", "module.exports = { async run() {} };", /name/],
    ["an unknown dedupe", 'module.exports = { name: "d", dedupe: "sometimes", async run() {} };', /dedupe/],
    ["a require of a Node built-in", 'const fs = require("fs"); module.exports = { name: "fs", async run() {} };', /fs/],
    ["an import of a Node built-in", 'import { readFileSync } from "node:fs"; export default { name: "fs", async run() {} };', /fs/],
    ["an import of a package not on the allowlist", 'import x from "left-pad"; export default { name: "lp", async run() {} };', /left-pad/],
    ["a memory bomb at load", "const a = []; for (;;) a.push(new Array(1e6).fill(1));", /MB|memory|within/],
    [
      "a prop named __proto__",
      'module.exports = { name: "p", props: JSON.parse(\'{"__proto__": "string"}\'), async run() {} };',
      /__proto__/,
    ],
    ["a prop without a type", 'module.exports = { name: "p", props: { x: { label: "X" } }, async run() {} };', /prop x/],
  ])("answers 400 quickly with the reason for %s", async (_label, code, reason) => {
    const u = await td.createUser();
    const started = Date.now();
    const res = await u.api.post("/v1/components", { json: { component_code: code } });
    expect(Date.now() - started).toBeLessThan(5000);
    expectError(res, 400, reason);
    // Nothing was saved, and the daemon still works.
    const ok = await u.api.post("/v1/components", { json: { component_code: HTTP_ESM } });
    expectStatus(ok, 200);
  });

  it("evaluates code in the sandbox, never in the daemon's realm", async () => {
    const u = await td.createUser();
    const marker = `tributaryComponentsProbe${Date.now()}`;
    const code = `globalThis.${marker} = true; module.exports = { name: [typeof require, typeof Buffer, typeof process.binding].join("/"), async run() {} };`;
    const c = await createComponent(u.api, code);
    expect((globalThis as Record<string, unknown>)[marker]).toBeUndefined();
    // `require` exists only as the refusing stub; Node's Buffer and process internals are absent.
    expect(c.name).toBe("function/undefined/undefined");
    const exit = await u.api.post("/v1/components", { json: { component_code: "process.exit(3); module.exports = {}" } });
    expectError(exit, 400);
    expectStatus(await u.api.get("/v1/users/me"), 200);
  });
});

describe("code that would break the compiler", () => {
  /** A component whose run() returns `expr`: about 500 KB, under the default body limit. */
  const wrap = (expr: string) => `module.exports = { name: "deep", run() { return ${expr}; } };`;

  it("answers 400 to 500 KB of nested brackets, and the next create and /readyz still work", async () => {
    const u = await td.createUser();
    const res = await u.api.post("/v1/components", { json: { component_code: wrap("[".repeat(250_000) + "]".repeat(250_000)) } });
    expectError(res, 400, /nest/i);
    expectStatus(await u.api.post("/v1/components", { json: { component_code: uniqueComponent() } }), 200);
    expectStatus(await client(td.url).get("/readyz"), 200);
  });

  it("answers 400 to code that stops the compiler, and restarts it for the next create", async () => {
    // A member chain is not bracket nesting, but esbuild's parser recurses once per link: 250,000
    // links overflow its stack and end its service process. This checks the backstop, not the pre-check.
    const u = await td.createUser();
    const res = await u.api.post("/v1/components", { json: { component_code: wrap(`a${".b".repeat(250_000)}`) } });
    expectError(res, 400, /could not be compiled/);
    expectStatus(await u.api.post("/v1/components", { json: { component_code: uniqueComponent() } }), 200);
    expectStatus(await client(td.url).get("/readyz"), 200);
  }, 60_000);
});

describe("GET /components/{key|id}", () => {
  it("returns a saved component by id and by key", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, TIMER_CJS);
    const byId = await u.api.get(`/v1/components/${c.id}`);
    expectStatus(byId, 200);
    expect(byId.body.data).toEqual(c);
    const byKey = await u.api.get("/v1/components/api-timer");
    expectStatus(byKey, 200);
    expect(byKey.body.data.id).toBe(c.id);
  });

  it("returns the newest of the user's components with a key", async () => {
    const u = await td.createUser();
    const older = await createComponent(u.api, keyedComponent("shared-key", "one"));
    const newer = await createComponent(u.api, keyedComponent("shared-key", "two"));
    expect(newer.id).not.toBe(older.id);
    const res = await u.api.get("/v1/components/shared-key");
    expectStatus(res, 200);
    expect(res.body.data).toMatchObject({ id: newer.id, name: "Keyed two" });
    // The older one is still reachable by id.
    expect((await u.api.get(`/v1/components/${older.id}`)).body.data.name).toBe("Keyed one");
  });

  it("answers 404 for unknown keys and ids, and for another user's component", async () => {
    const owner = await td.createUser();
    const other = await td.createUser();
    const c = await createComponent(owner.api, keyedComponent("private-key", "p"));
    expectError(await other.api.get(`/v1/components/${c.id}`), 404);
    expectError(await other.api.get("/v1/components/private-key"), 404);
    expectError(await owner.api.get("/v1/components/sc_doesnotexist000"), 404);
    expectError(await owner.api.get("/v1/components/no-such-key"), 404);
    expectError(await owner.api.get(`/v1/components/${"k".repeat(300)}`), 404);
  });

  it("answers 405 to methods the path does not take", async () => {
    const u = await td.createUser();
    const c = await createComponent(u.api, HTTP_ESM);
    expectError(await u.api.del(`/v1/components/${c.id}`), 405);
    expectError(await u.api.put(`/v1/components/${c.id}`, { json: {} }), 405);
  });
});

describe("GET /components/registry/{key}", () => {
  it("serves the shipped HTTP component", async () => {
    const u = await td.createUser();
    const res = await u.api.get("/v1/components/registry/http");
    expectStatus(res, 200);
    const c = res.body.data;
    expect(c).toMatchObject({ key: "http", name: "HTTP Requests", version: "1.0.0" });
    expect(c.id).toMatch(/^sc_[A-Za-z0-9]{10,}$/);
    expect(c.code_hash).toBe(sha256(c.code));
    expect(c.configurable_props).toEqual([{ name: "http", type: "$.interface.http" }]);
  });

  it("serves the shipped timer component with its default interval", async () => {
    const u = await td.createUser();
    const res = await u.api.get("/v1/components/registry/timer");
    expectStatus(res, 200);
    expect(res.body.data.configurable_props).toEqual([
      { name: "db", type: "$.service.db" },
      { name: "timer", type: "$.interface.timer", label: "Interval", default: { intervalSeconds: 900 } },
    ]);
  });

  it("gives every user the same registry component, usable as a source's component_id", async () => {
    const a = await td.createUser();
    const b = await td.createUser();
    const ra = (await a.api.get("/v1/components/registry/http")).body.data;
    const rb = (await b.api.get("/v1/components/registry/http")).body.data;
    expect(rb.id).toBe(ra.id);
    const s = await createSource(b.api, { component_id: rb.id });
    expect(s.component_id).toBe(rb.id);
    expect(s.configured_props.http.endpoint_url).toMatch(/\/e\/[A-Za-z0-9]{16,}$/);
  });

  it("answers 404 with an error body for an unknown key, and 401 without a key", async () => {
    const u = await td.createUser();
    expectError(await u.api.get("/v1/components/registry/no-such-component"), 404);
    expectError(await u.api.get("/v1/components/registry/..%2F..%2Fpackage.json"), 404);
    expectError(await client(td.url).get("/v1/components/registry/http"), 401);
  });
});

describe("component_url", () => {
  it("fetches the code from the URL and keeps the URL", async () => {
    const server = await loopbackServer((_req, res) => {
      res.setHeader("content-type", "application/javascript");
      res.end(TYPED_PROPS);
    });
    try {
      const u = await td.createUser();
      const url = server.url("/components/typed.js");
      const res = await u.api.post("/v1/components", { json: { component_url: url } });
      expectStatus(res, 200);
      expect(res.body.data).toMatchObject({ name: "API Typed", code: TYPED_PROPS, code_hash: sha256(TYPED_PROPS), component_url: url });
      expect(server.hits).toEqual(["/components/typed.js"]);
    } finally {
      await server.close();
    }
  });

  it("is metadata only when component_code is given too: nothing is fetched", async () => {
    const server = await loopbackServer((_req, res) => res.end(TYPED_PROPS));
    try {
      const u = await td.createUser();
      const url = server.url("/unused.js");
      const res = await u.api.post("/v1/components", { json: { component_url: url, component_code: HTTP_ESM } });
      expectStatus(res, 200);
      expect(res.body.data).toMatchObject({ name: "API HTTP", component_url: url });
      expect(server.hits).toEqual([]);
    } finally {
      await server.close();
    }
  });

  it("follows a redirect to the code", async () => {
    const server = await loopbackServer((req, res) => {
      if (req.url === "/old.js") {
        res.statusCode = 302;
        res.setHeader("location", "/new.js");
        res.end();
      } else res.end(HTTP_ESM);
    });
    try {
      const u = await td.createUser();
      const res = await u.api.post("/v1/components", { query: { component_url: server.url("/old.js") } });
      expectStatus(res, 200);
      expect(res.body.data.name).toBe("API HTTP");
      expect(server.hits).toEqual(["/old.js", "/new.js"]);
    } finally {
      await server.close();
    }
  });

  it("answers 400 naming component_url when the URL answers 404 or 500", async () => {
    const server = await loopbackServer((req, res) => {
      res.statusCode = req.url === "/missing.js" ? 404 : 500;
      res.end("nope");
    });
    try {
      const u = await td.createUser();
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/missing.js") } }), 400, /component_url.*404/);
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/broken.js") } }), 400, /component_url.*500/);
    } finally {
      await server.close();
    }
  });

  it("answers 400 to a body over the size limit, declared or streamed", async () => {
    const big = `// ${"x".repeat(FETCH_MAX_BYTES)}\n${HTTP_ESM}`;
    const server = await loopbackServer((req, res) => {
      if (req.url === "/chunked.js") {
        // No content-length: the limit must be enforced while streaming.
        res.write(big.slice(0, 4096));
        res.end(big.slice(4096));
      } else {
        res.setHeader("content-length", Buffer.byteLength(big));
        res.end(big);
      }
    });
    try {
      const u = await td.createUser();
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/declared.js") } }), 400, /component_url/);
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/chunked.js") } }), 400, /component_url/);
    } finally {
      await server.close();
    }
  });

  it("answers 400 when the URL does not answer in time", async () => {
    const server = await loopbackServer(() => {
      // Never answers.
    });
    try {
      const u = await td.createUser();
      const started = Date.now();
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/slow.js") } }), 400, /component_url/);
      expect(Date.now() - started).toBeLessThan(FETCH_TIMEOUT_MS + 3000);
    } finally {
      await server.close();
    }
  });

  it("answers 400 when the fetched text is not a component", async () => {
    const server = await loopbackServer((_req, res) => res.end("<html>not code</html>"));
    try {
      const u = await td.createUser();
      expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/page.html") } }), 400);
    } finally {
      await server.close();
    }
  });

  it.each([
    ["no scheme", "example.com/c.js"],
    ["file://", "file:///etc/passwd"],
    ["ftp://", "ftp://example.com/c.js"],
    ["no host", "http:///c.js"],
    ["a number", 7],
    ["a URL over 2048 characters", `https://example.com/${"a".repeat(2100)}`],
  ])("answers 400 naming component_url for %s", async (_label, url) => {
    const u = await td.createUser();
    expectError(await u.api.post("/v1/components", { json: { component_url: url } }), 400, /component_url/);
  });

  it("answers 400 when nothing listens at the URL", async () => {
    const server = await loopbackServer((_req, res) => res.end());
    const url = server.url("/gone.js");
    await server.close();
    const u = await td.createUser();
    expectError(await u.api.post("/v1/components", { json: { component_url: url } }), 400, /component_url/);
  });

  describe("without ALLOW_PRIVATE_DESTINATIONS", () => {
    let guarded: TestDaemon;
    beforeAll(async () => {
      guarded = await startTestDaemon({ ALLOW_PRIVATE_DESTINATIONS: "false" });
    });
    afterAll(async () => {
      await guarded?.close();
    });

    it("refuses a loopback component_url with a 400 and never connects", async () => {
      const server = await loopbackServer((_req, res) => res.end(HTTP_ESM));
      try {
        const u = await guarded.createUser();
        expectError(await u.api.post("/v1/components", { json: { component_url: server.url("/c.js") } }), 400, /component_url/);
        expect(server.hits).toEqual([]);
      } finally {
        await server.close();
      }
    });
  });
});
