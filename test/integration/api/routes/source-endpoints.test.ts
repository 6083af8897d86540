import { Agent, type IncomingHttpHeaders, request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../../helpers/daemon.js";
import { waitFor } from "../../../helpers/receiver.js";
import { connectRedis } from "../../../helpers/redis.js";
import { createKeys } from "../../../../src/store/keys.js";
import { type Json, expectStatus, createSource } from "../../runtime/support.js";

/**
 * HTTP source endpoints through the whole daemon (SPEC §5 "HTTP", "$logs and $errors"): real
 * HTTP to `/e/<token>`, real queues and workers, real isolates. Components are written the way
 * Pipedream's own sources are.
 */

const BODY_LIMIT = 4096;
const SANDBOX_TIMEOUT_MS = 1000;

/** Emits everything run() receives, so each field can be checked. */
const CAPTURE = `export default {
  key: "rt-capture",
  name: "Runtime Capture",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit(
      { method: event.method, path: event.path, query: event.query, headers: event.headers, bodyRaw: event.bodyRaw, body: event.body },
      { summary: event.method + " " + event.path },
    );
  },
};
`;

/** Sleeps before emitting, so an answer that came first proves the run was not awaited. */
const SLOW = `module.exports = {
  name: "Runtime Slow",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    await new Promise((resolve) => setTimeout(resolve, 700));
    this.$emit({ late: event.body });
  },
};
`;

/** A custom response component: the first respond() wins, the run goes on afterwards. */
const ECHO_TWICE = `module.exports = {
  name: "Runtime Echo",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) {
    this.http.respond({ status: "201", headers: { "X-Echo": "first" }, body: { echoed: event.body } });
    this.http.respond({ status: 500, headers: { "X-Echo": "second" }, body: "second answer" });
    await new Promise((resolve) => setTimeout(resolve, 50));
    this.$emit({ after: "respond" });
  },
};
`;

const custom = (body: string) => `module.exports = {
  name: "Runtime Custom",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) { ${body} },
};
`;

/** Console output of every kind that $logs records. */
const LOGGER = `export default {
  name: "Runtime Logger",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    console.log("hello", { a: 1 });
    console.error("bad", 42);
    console.warn("careful");
    this.$emit({ logged: true });
  },
};
`;

/** Emits, then throws an error with a code. */
const THROWER = `module.exports = {
  name: "Runtime Thrower",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) {
    this.$emit({ before: "throw" });
    const err = new Error("boom " + event.body.n);
    err.code = "E_BOOM";
    throw err;
  },
};
`;

let td: TestDaemon;
let anon: Client;

beforeAll(async () => {
  td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: String(SANDBOX_TIMEOUT_MS), BODY_LIMIT_BYTES: String(BODY_LIMIT) });
  anon = client(td.url);
});

afterAll(async () => {
  await td?.close();
});

const endpointOf = (s: Json): string => String(s.configured_props.http.endpoint_url);

/** Every event of a channel, newest first, with full payloads. */
async function summaries(api: Client, sourceId: string, eventName?: string): Promise<Json[]> {
  const res = await api.get(`/v1/sources/${sourceId}/event_summaries`, { query: { limit: 100, expand: "event", event_name: eventName } });
  expectStatus(res, 200);
  return res.body.data;
}

/** Polls until the channel holds at least `n` events and returns them (newest first). */
async function atLeast(api: Client, sourceId: string, n: number, eventName?: string): Promise<Json[]> {
  return waitFor(
    async () => {
      const d = await summaries(api, sourceId, eventName);
      return d.length >= n ? d : undefined;
    },
    { what: `${n} event(s) on ${eventName ?? "the default channel"} of ${sourceId}` },
  );
}

describe("what run() receives", () => {
  it("passes any method and sub-path with query, lower-case headers, the raw body and the parsed body", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, CAPTURE);
    const url = endpointOf(s);
    const sent: [string, string, { body?: string; headers: Record<string, string> }][] = [
      [
        "POST",
        "",
        {
          body: JSON.stringify({ a: 1, nested: { b: [1, 2] } }),
          headers: { "Content-Type": "application/json", "X-Custom-Header": "Yes" },
        },
      ],
      [
        "PUT",
        "/deep/nested/path?x=1&y=two&y=three",
        { body: "a=1&b=2&b=3", headers: { "content-type": "application/x-www-form-urlencoded" } },
      ],
      ["PATCH", "/text", { body: "hello world", headers: { "content-type": "text/plain" } }],
      ["DELETE", "/bad", { body: "{not json", headers: { "content-type": "application/json; charset=utf-8" } }],
      ["GET", "/?q=1", { headers: {} }],
    ];
    for (const [i, [method, sub, opts]] of sent.entries()) {
      const res = await anon.request(method, url + sub, { body: opts.body, headers: { ...opts.headers, "x-req": String(i) } });
      expectStatus(res, 200);
    }
    const events = await atLeast(u.api, s.id, sent.length);
    const byReq = (i: number) => {
      const e = events.find((x) => x.event.headers["x-req"] === String(i));
      expect(e, `event for request ${i}`).toBeDefined();
      return e.event;
    };

    const json = byReq(0);
    expect(json.method).toBe("POST");
    expect(json.path).toBe("/");
    expect(json.query).toEqual({});
    expect(json.headers["x-custom-header"]).toBe("Yes");
    expect(Object.keys(json.headers).every((k: string) => k === k.toLowerCase())).toBe(true);
    expect(json.bodyRaw).toBe('{"a":1,"nested":{"b":[1,2]}}');
    expect(json.body).toEqual({ a: 1, nested: { b: [1, 2] } });

    const form = byReq(1);
    expect(form.method).toBe("PUT");
    expect(form.path).toBe("/deep/nested/path");
    expect(form.query).toEqual({ x: "1", y: ["two", "three"] });
    expect(form.bodyRaw).toBe("a=1&b=2&b=3");
    expect(form.body).toEqual({ a: "1", b: ["2", "3"] });

    const text = byReq(2);
    expect(text.method).toBe("PATCH");
    expect(text.path).toBe("/text");
    expect(text.body).toBe("hello world");

    // A JSON content type whose body does not parse: body is the raw text, not an error.
    const bad = byReq(3);
    expect(bad.method).toBe("DELETE");
    expect(bad.bodyRaw).toBe("{not json");
    expect(bad.body).toBe("{not json");

    const get = byReq(4);
    expect(get.method).toBe("GET");
    expect(get.path).toBe("/");
    expect(get.query).toEqual({ q: "1" });
    expect(get.bodyRaw).toBe("");

    // The summary is the component's own.
    const summary = events.find((e) => e.event.headers["x-req"] === "1");
    expect(summary.metadata.summary).toBe("PUT /deep/nested/path");
    expect(summary.metadata.emitter_id).toBe(s.id);
  });

  it("answers 200 {success: true} before the run, which happens later in a worker", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, SLOW);
    const res = await anon.post(endpointOf(s), { json: { n: 1 } });
    expectStatus(res, 200);
    expect(res.body).toEqual({ success: true });
    expect(res.headers.get("content-type")).toMatch(/application\/json/);
    // The run sleeps 700 ms before emitting: when the answer arrives it has not emitted yet.
    expect(await summaries(u.api, s.id)).toEqual([]);
    const [e] = await atLeast(u.api, s.id, 1);
    expect(e.event).toEqual({ late: { n: 1 } });
  });
});

describe("customResponse", () => {
  it("answers with the first respond(): string status coerced, headers set, an object body as JSON", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, ECHO_TWICE);
    const res = await anon.post(`${endpointOf(s)}/hook`, { json: { ping: "pong" } });
    expectStatus(res, 201);
    expect(res.headers.get("x-echo")).toBe("first");
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.body).toEqual({ echoed: { ping: "pong" } });
    // The run carried on after responding, and its later emit is recorded.
    const [e] = await atLeast(u.api, s.id, 1);
    expect(e.event).toEqual({ after: "respond" });
  });

  it("sends a string body as it is, with the component's content type", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      custom(`this.http.respond({ status: 202, headers: { "content-type": "text/csv" }, body: "a,b\\n1,2" });`),
    );
    const res = await anon.get(endpointOf(s));
    expectStatus(res, 202);
    expect(res.headers.get("content-type")).toMatch(/^text\/csv/);
    expect(res.text).toBe("a,b\n1,2");
  });

  it("answers 504 when the run never responds before the time limit, and records the time-out on $errors", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, custom("await new Promise(() => {});"));
    const started = Date.now();
    const res = await anon.post(endpointOf(s), { json: { wait: true } });
    expectStatus(res, 504);
    expect(Date.now() - started).toBeGreaterThanOrEqual(SANDBOX_TIMEOUT_MS - 50);
    expect(res.body).toEqual({ error: "source run timed out", code: "source_run_failed" });
    const [err] = await atLeast(u.api, s.id, 1, "$errors");
    expect(err.event.error.code).toBe("TIMEOUT");
    expect(err.event.original_event.body).toEqual({ wait: true });
  });

  it("answers 502 no_response when the run finishes without responding", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, custom(`this.$emit({ ran: true });`));
    const res = await anon.post(endpointOf(s), { json: {} });
    expectStatus(res, 502);
    expect(res.body.code).toBe("no_response");
    expect(res.body.error).toMatch(/respond/);
    // Not a failure of the run: what it emitted is kept.
    const [e] = await atLeast(u.api, s.id, 1);
    expect(e.event).toEqual({ ran: true });
  });

  it("answers a generic 502 when the run throws before responding; the error goes to $errors only", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, custom(`throw new TypeError("secret detail " + event.method);`));
    const res = await anon.put(endpointOf(s), { json: {} });
    expectStatus(res, 502);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.body).toEqual({ error: "source run failed", code: "source_run_failed" });
    expect(res.text).not.toMatch(/secret detail|TypeError/);
    const [err] = await atLeast(u.api, s.id, 1, "$errors");
    expect(err.event.error).toMatchObject({ code: "TypeError", msg: "secret detail PUT" });
  });

  it.each([100, 101, 103, 199])(
    "refuses respond({status: %i}) to a request asking to upgrade: respond() throws, a generic 502, the connection stays HTTP, the problem on $errors",
    async (status) => {
      const u = await td.createUser();
      const s = await createSource(
        u.api,
        custom(`this.http.respond({ status: ${status}, headers: { upgrade: "websocket", connection: "Upgrade" }, body: "" });`),
      );
      const answer = await upgradeRequest(endpointOf(s));
      expect(answer).toMatchObject({ kind: "response", status: 502 });
      // The call itself threw (the component author sees it there); nothing reached the endpoint.
      expect(JSON.parse(answer.body)).toEqual({ error: "source run failed", code: "source_run_failed" });
      expect(answer.headers.upgrade).toBeUndefined();
      const [err] = await atLeast(u.api, s.id, 1, "$errors");
      expect(err.event.error).toMatchObject({ code: "Error", msg: "http.respond: status must be an integer from 200 to 599" });
      expect(err.event.original_event.headers.upgrade).toBe("websocket");
    },
  );

  it("drops hop-by-hop and framing headers from respond() and frames the body itself", async () => {
    const u = await td.createUser();
    const headers = {
      "transfer-encoding": "chunked",
      "content-length": "3",
      connection: "close, x-hop",
      "x-hop": "1",
      "keep-alive": "timeout=1",
      upgrade: "h2c",
      te: "trailers",
      trailer: "x-trailer",
      "proxy-authenticate": "Basic",
      "x-kept": "yes",
    };
    const s = await createSource(
      u.api,
      custom(`this.http.respond({ status: 200, headers: ${JSON.stringify(headers)}, body: "hello world, framed by the daemon" });`),
    );
    const url = new URL(endpointOf(s));
    // Two requests on one kept-alive socket: a component that framed the first answer would break the second.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 2; i++) {
        const res = await plainGet(url, agent);
        expect(res.status).toBe(200);
        expect(res.body).toBe("hello world, framed by the daemon");
        expect(res.headers["x-kept"]).toBe("yes");
        for (const name of ["x-hop", "upgrade", "te", "trailer", "proxy-authenticate", "transfer-encoding"]) {
          expect(res.headers[name], name).toBeUndefined();
        }
        expect(res.headers["content-length"]).toBe(String(Buffer.byteLength(res.body)));
        expect(res.headers["keep-alive"]).not.toBe("timeout=1");
        expect(res.headers.connection).not.toMatch(/close|x-hop/);
      }
    } finally {
      agent.destroy();
    }
  });
});

describe("metrics", () => {
  let unlimited: TestDaemon;

  beforeAll(async () => {
    unlimited = await startTestDaemon({ SOURCE_HTTP_RATE_PER_SECOND: "100000" });
  });

  afterAll(async () => {
    await unlimited?.close();
  });

  it("labels the request histogram by status class, so statuses a component chooses add no series", async () => {
    const u = await unlimited.createUser("paid");
    const anon = client(unlimited.url);
    const s = await createSource(u.api, custom(`this.http.respond({ status: Number(event.query.s), body: "" });`));
    const url = endpointOf(s);
    const statuses = Array.from({ length: 100 }, (_, i) => 200 + i * 4);
    for (const status of statuses) {
      const res = await anon.request(status % 8 === 0 ? "POST" : "PUT", `${url}?s=${status}`);
      expect(res.status).toBe(status);
    }
    const series = (await anon.get("/metrics")).text
      .split("\n")
      .filter((l) => l.startsWith('tributary_http_request_duration_seconds_count{route="/e/:token"'));
    const labels = series.map((l) => /status="([^"]*)"/.exec(l)?.[1]);
    expect(new Set(labels)).toEqual(new Set(["2xx", "3xx", "4xx", "5xx"]));
    // Two methods, four classes (other tests' requests to /e/:token add at most a few more).
    expect(series.length).toBeLessThanOrEqual(16);
  });
});

describe("endpoint availability", () => {
  it("answers 404 for a token indexed for a source that does not exist (a create or delete stopped half way)", async () => {
    const u = await td.createUser();
    const keys = createKeys(td.prefix);
    const redis = connectRedis();
    try {
      const token = "Stale0123456789abcdefStale0123456";
      await redis.hset(keys.endpoints(), token, `${u.id} dc_neverthere00`);
      const res = await anon.post(`/e/${token}`, { json: {} });
      expectStatus(res, 404);
      expect(res.body.code).toBe("endpoint_not_found");
    } finally {
      redis.disconnect();
    }
  });

  it("answers 404 for an inactive source, serves it again once re-enabled, and 404 after deletion", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, CAPTURE);
    const url = endpointOf(s);
    expectStatus(await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active: false } }), 200);
    for (const target of [url, `${url}/sub/path`]) {
      const res = await anon.post(target, { json: {} });
      expectStatus(res, 404);
      expect(res.body.code).toBe("endpoint_not_found");
    }
    const on = await u.api.put(`/v1/sources/${s.id}`, { json: { component_id: s.component_id, active: true } });
    expectStatus(on, 200);
    expect(endpointOf(on.body.data)).toBe(url);
    expectStatus(await anon.post(url, { json: { back: true } }), 200);
    await atLeast(u.api, s.id, 1);

    expectStatus(await u.api.del(`/v1/sources/${s.id}`), 204);
    for (const target of [url, `${url}/sub/path`]) expectStatus(await anon.post(target, { json: {} }), 404);
  });

  it("answers 404 for tokens that were never issued, whatever their shape", async () => {
    for (const path of ["/e/nonexistent123", "/e/AAAAAAAAAAAAAAAAAAAAAAAA/x", "/e/short", "/e/", "/e/bad$token!!"]) {
      const res = await anon.post(path, { json: {} });
      expect(res.status, `${path}: ${res.text}`).toBe(404);
    }
  });

  it("answers 413 to a body over BODY_LIMIT_BYTES, declared or streamed, and accepts one at the limit", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, CAPTURE);
    const url = endpointOf(s);
    const over = await anon.post(url, { body: "x".repeat(BODY_LIMIT + 1), headers: { "content-type": "text/plain" } });
    expectStatus(over, 413);
    expect(over.body.code).toBe("payload_too_large");

    // Chunked, so no Content-Length announces the size: the limit applies while reading.
    const streamed = await chunkedPost(url, ["y".repeat(BODY_LIMIT / 2), "y".repeat(BODY_LIMIT / 2), "y".repeat(BODY_LIMIT / 2)]);
    expect(streamed).toBe(413);

    const atLimit = await anon.post(url, { body: "z".repeat(BODY_LIMIT), headers: { "content-type": "text/plain", "x-req": "limit" } });
    expectStatus(atLimit, 200);
    const [e] = await atLeast(u.api, s.id, 1);
    expect(e.event.headers["x-req"]).toBe("limit");
    expect(e.event.bodyRaw).toHaveLength(BODY_LIMIT);
    // Nothing from the refused requests was run.
    expect(await summaries(u.api, s.id)).toHaveLength(1);
  });
});

/** What came back to a request asking to switch protocols: a final response, or an upgrade, or nothing. */
type UpgradeAnswer =
  | { kind: "response"; status: number; headers: IncomingHttpHeaders; body: string }
  | { kind: "upgrade" | "information"; status: number; headers: IncomingHttpHeaders; body: string }
  | { kind: "timeout"; status: 0; headers: IncomingHttpHeaders; body: string };

/** GETs with `Connection: Upgrade` as a WebSocket client would; waits at most 5 s for a final answer. */
function upgradeRequest(url: string): Promise<UpgradeAnswer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, {
      method: "GET",
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      },
    });
    const timer = setTimeout(() => {
      req.destroy();
      resolve({ kind: "timeout", status: 0, headers: {}, body: "" });
    }, 5000);
    const done = (a: UpgradeAnswer) => {
      clearTimeout(timer);
      req.destroy();
      resolve(a);
    };
    req.on("upgrade", (res) => done({ kind: "upgrade", status: res.statusCode ?? 0, headers: res.headers, body: "" }));
    req.on("information", (info) => done({ kind: "information", status: info.statusCode, headers: {}, body: "" }));
    req.on("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () => done({ kind: "response", status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.end();
  });
}

/** A plain GET through node:http (every response header visible, as sent). */
function plainGet(url: URL, agent: Agent): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: "GET", agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/** POSTs a body in chunks without Content-Length; resolves with the status. */
function chunkedPost(url: string, chunks: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: "POST", headers: { "content-type": "text/plain", "transfer-encoding": "chunked" } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    // The server may answer and close before the last chunk is written.
    req.on("error", (err: NodeJS.ErrnoException) => (err.code === "ECONNRESET" || err.code === "EPIPE" ? undefined : reject(err)));
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe("$logs and $errors", () => {
  it("records console output on $logs as {ts, k, msg}", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, LOGGER);
    const before = Date.now();
    expectStatus(await anon.post(endpointOf(s), { json: {} }), 200);
    const logs = await atLeast(u.api, s.id, 3, "$logs");
    // Newest first: reverse to read them in the order they were written.
    const entries = logs.map((l) => l.event).reverse();
    expect(entries.map((e) => [e.k, e.msg])).toEqual([
      ["console.log", "hello { a: 1 }"],
      ["console.error", "bad 42"],
      ["console.warn", "careful"],
    ]);
    for (const e of entries) {
      expect(Object.keys(e).sort()).toEqual(["k", "msg", "ts"]);
      expect(e.ts).toBeGreaterThanOrEqual(before);
      expect(e.ts).toBeLessThanOrEqual(Date.now());
    }
    expect(logs[0].metadata.emitter_id).toBe(s.id);
    // The emit went to the default channel, not $logs.
    const [e] = await atLeast(u.api, s.id, 1);
    expect(e.event).toEqual({ logged: true });
  });

  it("records a thrown error on $errors with the original event and context, keeping earlier emits", async () => {
    const u = await td.createUser();
    const s = await createSource(u.api, THROWER);
    const before = Date.now();
    expectStatus(await anon.post(`${endpointOf(s)}/x`, { json: { n: 7 } }), 200);
    const [rec] = await atLeast(u.api, s.id, 1, "$errors");
    const ev = rec.event;
    expect(Object.keys(ev).sort()).toEqual(["error", "original_context", "original_event"]);
    expect(ev.error.code).toBe("E_BOOM");
    expect(ev.error.msg).toBe("boom 7");
    expect(ev.error.stack).toMatch(/boom 7/);
    expect(Date.parse(ev.error.ts)).toBeGreaterThanOrEqual(before - 1000);
    expect(ev.original_event).toMatchObject({ method: "POST", path: "/x", body: { n: 7 } });
    expect(ev.original_context.emitter_id).toBe(s.id);
    expect(ev.original_context.id).toMatch(/^emit_[A-Za-z0-9]{10,}$/);
    expect(Number.isNaN(Date.parse(ev.original_context.ts))).toBe(false);
    const [emitted] = await atLeast(u.api, s.id, 1);
    expect(emitted.event).toEqual({ before: "throw" });
  });
});

describe("rate limit", () => {
  let limited: TestDaemon;

  beforeAll(async () => {
    limited = await startTestDaemon({ SOURCE_HTTP_RATE_PER_SECOND: "2" });
  });

  afterAll(async () => {
    await limited?.close();
  });

  it("answers 429 with Retry-After past a burst of twice the rate, per source, and recovers", async () => {
    const u = await limited.createUser();
    const s = await createSource(u.api, CAPTURE);
    const other = await createSource(u.api, CAPTURE);
    const http = client(limited.url);
    const started = Date.now();
    const burst = await Promise.all(Array.from({ length: 10 }, () => http.post(endpointOf(s), { json: {} })));
    const elapsedS = (Date.now() - started) / 1000;
    const ok = burst.filter((r) => r.status === 200);
    const refused = burst.filter((r) => r.status === 429);
    expect(ok.length + refused.length, burst.map((r) => r.status).join(",")).toBe(10);
    // A full bucket holds 2 x 2 tokens, refilled at 2 per second while the burst was sent.
    expect(ok.length).toBeGreaterThanOrEqual(4);
    expect(ok.length).toBeLessThanOrEqual(4 + Math.ceil(elapsedS * 2));
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.body.code).toBe("rate_limited");
      expect(r.headers.get("retry-after")).toMatch(/^[1-9]\d*$/);
    }
    // Another source of the same user has a bucket of its own.
    expectStatus(await http.post(endpointOf(other), { json: {} }), 200);
    // After the advertised wait the endpoint takes requests again.
    const wait = Number(refused[0]?.headers.get("retry-after"));
    const again = await waitFor(
      async () => {
        const r = await http.post(endpointOf(s), { json: {} });
        return r.status === 200 ? r : undefined;
      },
      { timeoutMs: wait * 1000 + 2000, intervalMs: 250, what: "the endpoint to accept requests again" },
    );
    expect(again.body).toEqual({ success: true });
  });
});
