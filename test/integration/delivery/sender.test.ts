import { createServer, type IncomingMessage, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createSender, RESPONSE_SNIPPET_BYTES, type SendResult, type Sender } from "../../../src/delivery/sender.js";
import { createGuardedAgent } from "../../../src/net/guarded-agent.js";

/** A captured request as the receiver saw it. */
interface Received {
  readonly method: string | undefined;
  readonly url: string | undefined;
  readonly headers: IncomingMessage["headers"];
  readonly body: string;
}

const servers: Server[] = [];
const closers: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

async function receiver(
  respond: RequestListener = (_req, res) => res.end(),
): Promise<{ url: (path?: string) => string; port: number; got: Received[] }> {
  const got: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      got.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      respond(req, res);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { port, got, url: (path = "/hook") => `http://127.0.0.1:${port}${path}` };
}

function sender(options: { allowPrivate?: boolean; timeoutMs?: number } = {}): Sender {
  const agent = createGuardedAgent({ allowPrivate: options.allowPrivate ?? true, connectTimeoutMs: 2_000 });
  const s = createSender({ agent, timeoutMs: options.timeoutMs ?? 5_000 });
  closers.push(async () => {
    await s.close();
    await agent.destroy();
  });
  return s;
}

const payload = { url: "", body: '{"hello":"world"}', headers: { "webhook-id": "evt_1", "x-tributary-attempt": "1" } };

function expectResponse(r: SendResult): Extract<SendResult, { statusCode: number }> {
  if (!("statusCode" in r)) throw new Error(`expected a response, got ${r.errorKind}: ${r.error}`);
  return r;
}

function expectError(r: SendResult): Extract<SendResult, { errorKind: string }> {
  if (!("errorKind" in r)) throw new Error(`expected an error, got HTTP ${r.statusCode}`);
  return r;
}

describe("sender", () => {
  it("POSTs the body as JSON with the given headers and reports a 200 (its body drained, not kept)", async () => {
    const rx = await receiver((_req, res) => res.end("thanks"));
    const r = expectResponse(await sender().send({ ...payload, url: rx.url() }));
    expect(r).toMatchObject({ statusCode: 200, retryAfter: null, deliveryControl: null, responseSnippet: "" });
    expect(r.durationMs).toBeGreaterThanOrEqual(0);
    expect(rx.got).toHaveLength(1);
    expect(rx.got[0]).toMatchObject({ method: "POST", url: "/hook", body: '{"hello":"world"}' });
    expect(rx.got[0]!.headers).toMatchObject({ "content-type": "application/json", "webhook-id": "evt_1", "x-tributary-attempt": "1" });
  });

  it("keeps a caller's content-type", async () => {
    const rx = await receiver();
    await sender().send({ ...payload, url: rx.url(), headers: { "Content-Type": "application/json; charset=utf-8" } });
    expect(rx.got[0]!.headers["content-type"]).toBe("application/json; charset=utf-8");
  });

  it("reports a 500 with the start of its body", async () => {
    const rx = await receiver((_req, res) => {
      res.statusCode = 500;
      res.end("boom");
    });
    expect(await sender().send({ ...payload, url: rx.url() })).toMatchObject({ statusCode: 500, responseSnippet: "boom" });
  });

  it("does not follow a 302", async () => {
    const rx = await receiver((req, res) => {
      if (req.url === "/hook") {
        res.writeHead(302, { location: "/target" });
        res.end();
      } else res.end("followed");
    });
    expect(await sender().send({ ...payload, url: rx.url() })).toMatchObject({ statusCode: 302 });
    expect(rx.got.map((g) => g.url)).toEqual(["/hook"]);
  });

  it("reports a 410", async () => {
    const rx = await receiver((_req, res) => {
      res.statusCode = 410;
      res.end();
    });
    expect(await sender().send({ ...payload, url: rx.url() })).toMatchObject({ statusCode: 410 });
  });

  it("reports a 429 with its Retry-After", async () => {
    const rx = await receiver((_req, res) => {
      res.writeHead(429, { "retry-after": "2", "content-type": "application/json" });
      res.end('{"error":"slow down"}');
    });
    expect(await sender().send({ ...payload, url: rx.url() })).toMatchObject({
      statusCode: 429,
      retryAfter: "2",
      responseSnippet: '{"error":"slow down"}',
    });
  });

  it("reports the receiver's webhook-delivery header (receiver-driven control)", async () => {
    const rx = await receiver((_req, res) => {
      res.writeHead(400, { "Webhook-Delivery": "abort-message" });
      res.end();
    });
    expect(await sender().send({ ...payload, url: rx.url() })).toMatchObject({ statusCode: 400, deliveryControl: "abort-message" });
  });

  it(`keeps only the first ${RESPONSE_SNIPPET_BYTES} bytes of a large failure body, and gets through a large 2xx body`, async () => {
    const failing = await receiver((_req, res) => {
      res.statusCode = 502;
      res.end("a".repeat(200_000));
    });
    const r = expectResponse(await sender().send({ ...payload, url: failing.url() }));
    expect(r).toMatchObject({ statusCode: 502, responseSnippet: "a".repeat(RESPONSE_SNIPPET_BYTES) });
    const ok = await receiver((_req, res) => res.end("a".repeat(200_000)));
    expect(expectResponse(await sender().send({ ...payload, url: ok.url() }))).toMatchObject({ statusCode: 200, responseSnippet: "" });
  });

  it("times out a server that does not answer in time", async () => {
    const rx = await receiver(() => {
      // Never answers; afterEach closes the connection.
    });
    const started = Date.now();
    const r = expectError(await sender({ timeoutMs: 300 }).send({ ...payload, url: rx.url() }));
    expect(r.errorKind).toBe("timeout");
    expect(r.error).toMatch(/300 ms/);
    expect(r.durationMs).toBeGreaterThanOrEqual(250);
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it.each([200, 500])("counts a %i whose body stalls past the timeout as answered, keeping what arrived of a failure", async (status) => {
    const rx = await receiver((_req, res) => {
      res.writeHead(status);
      res.write("partial");
      // The body never ends.
    });
    // Long enough for the status line to arrive on a loaded machine: what is timed out here is the
    // body, and a timeout that fires before the headers would test the other case.
    const r = expectResponse(await sender({ timeoutMs: 2_000 }).send({ ...payload, url: rx.url() }));
    expect(r).toMatchObject({ statusCode: status, responseSnippet: status === 200 ? "" : "partial" });
  });

  it("sends the query string of the URL and reaches several URLs of one origin", async () => {
    const rx = await receiver();
    const s = sender();
    for (const path of ["/hook?token=a%20b&x=1", "/other", "/hook?token=a%20b&x=1"]) {
      expectResponse(await s.send({ ...payload, url: rx.url(path) }));
    }
    expect(rx.got.map((g) => g.url)).toEqual(["/hook?token=a%20b&x=1", "/other", "/hook?token=a%20b&x=1"]);
  });

  it("reports a malformed URL as an error, not a throw", async () => {
    expect(expectError(await sender().send({ ...payload, url: "http://" })).errorKind).toBe("other");
  });

  it("reports a closed port as a connection error", async () => {
    const rx = await receiver();
    const url = rx.url();
    const server = servers.pop()!;
    await new Promise((resolve) => server.close(resolve));
    const r = expectError(await sender().send({ ...payload, url }));
    expect(r.errorKind).toBe("connect");
    expect(r.error).toMatch(/ECONNREFUSED/);
  });

  it("refuses 127.0.0.1 when private destinations are not allowed, without connecting", async () => {
    const rx = await receiver();
    const r = expectError(await sender({ allowPrivate: false }).send({ ...payload, url: rx.url() }));
    expect(r.errorKind).toBe("refused_destination");
    expect(rx.got).toHaveLength(0);
  });

  it("refuses localhost, judged by its resolved address", async () => {
    const rx = await receiver();
    const r = expectError(await sender({ allowPrivate: false }).send({ ...payload, url: `http://localhost:${rx.port}/hook` }));
    expect(r.errorKind).toBe("refused_destination");
    expect(r.error).toMatch(/^destination refused/);
    expect(r.error).not.toMatch(/127\.0\.0\.1|::1/);
    expect(rx.got).toHaveLength(0);
  });

  it("reaches loopback when private destinations are allowed", async () => {
    const rx = await receiver();
    expect(await sender({ allowPrivate: true }).send({ ...payload, url: `http://localhost:${rx.port}/hook` })).toMatchObject({
      statusCode: 200,
    });
    expect(rx.got).toHaveLength(1);
  });

  it("never throws, even for a malformed URL", async () => {
    expect(await sender().send({ ...payload, url: "not a url" })).toMatchObject({ errorKind: "other" });
  });

  it("refuses sends after close, and close is idempotent", async () => {
    const rx = await receiver();
    const s = sender();
    await s.close();
    await s.close();
    expect(await s.send({ ...payload, url: rx.url() })).toMatchObject({ errorKind: "other", error: "sender is closed" });
    expect(rx.got).toHaveLength(0);
  });

  it("aborts an attempt in flight on close", async () => {
    let arrived!: () => void;
    const reached = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    // Never answers; only signals that the request is in.
    const rx = await receiver(() => arrived());
    const s = sender({ timeoutMs: 10_000 });
    const pending = s.send({ ...payload, url: rx.url() });
    await reached;
    await s.close();
    expect(await pending).toMatchObject({ errorKind: "other", error: "sender closed during the attempt" });
  });
});
