import type { LookupAddress } from "node:dns";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import {
  DESTINATION_REFUSED_MESSAGE,
  DestinationRefusedError,
  FetchTimeoutError,
  isDestinationRefused,
  RedirectError,
  ResponseTooLargeError,
} from "../../../src/net/errors.js";
import { guardedFetchText } from "../../../src/net/fetch-text.js";
import { createGuardedAgent, type ResolveAll } from "../../../src/net/guarded-agent.js";
import { isPrivateAddress } from "../../../src/net/private-address.js";

describe("isPrivateAddress", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["127.255.255.254", "loopback"],
    ["10.1.2.3", "RFC 1918"],
    ["172.16.0.1", "RFC 1918"],
    ["172.31.255.255", "RFC 1918"],
    ["192.168.1.1", "RFC 1918"],
    ["169.254.169.254", "cloud metadata (link-local)"],
    ["169.254.0.1", "link-local"],
    ["100.64.0.1", "carrier-grade NAT"],
    ["100.100.100.200", "Alibaba metadata (carrier-grade NAT)"],
    ["0.0.0.0", "unspecified"],
    ["0.1.2.3", "this network"],
    ["255.255.255.255", "broadcast"],
    ["224.0.0.1", "multicast"],
    ["239.255.255.250", "multicast"],
    ["240.0.0.1", "reserved"],
    ["192.0.2.1", "documentation"],
    ["198.18.0.1", "benchmarking"],
    ["::1", "IPv6 loopback"],
    ["::", "IPv6 unspecified"],
    ["fe80::1", "IPv6 link-local"],
    ["fe80::1%lo", "IPv6 link-local with zone"],
    ["fc00::1", "unique-local"],
    ["fd00:ec2::254", "AWS IPv6 metadata"],
    ["ff02::1", "IPv6 multicast"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:7f00:1", "IPv4-mapped loopback, hex"],
    ["::ffff:169.254.169.254", "IPv4-mapped metadata"],
    ["::ffff:0:10.0.0.1", "IPv4-translated private"],
    ["64:ff9b::127.0.0.1", "NAT64 of loopback"],
    ["64:ff9b:1::1", "local-use NAT64"],
    ["2002:7f00:1::", "6to4 of loopback"],
    ["2002:a00:1::1", "6to4 of 10.0.0.1"],
    ["2001::1", "Teredo"],
    ["2001:db8::1", "documentation"],
    ["::127.0.0.1", "IPv4-compatible loopback"],
    ["not-an-ip", "not an address (fail closed)"],
    ["", "empty (fail closed)"],
  ])("refuses %s (%s)", (ip) => {
    expect(isPrivateAddress(ip)).toBe(true);
  });

  it.each([
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "172.32.0.1",
    "100.128.0.1",
    "169.255.0.1",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "2002:808:808::1",
  ])("allows the public address %s", (ip) => {
    expect(isPrivateAddress(ip)).toBe(false);
  });
});

describe("isDestinationRefused", () => {
  it("finds the error through causes and AggregateErrors", () => {
    const refused = new DestinationRefusedError("h", "127.0.0.1");
    expect(isDestinationRefused(refused)).toBe(true);
    expect(isDestinationRefused(new Error("wrapped", { cause: refused }))).toBe(true);
    expect(isDestinationRefused(new AggregateError([new Error("x"), refused]))).toBe(true);
    expect(isDestinationRefused(new Error("other"))).toBe(false);
    expect(isDestinationRefused(undefined)).toBe(false);
  });
});

// --- The agent and the fetch against real loopback servers -----------------------------------

const servers: Server[] = [];
const agents: { close(): Promise<void> }[] = [];

afterEach(async () => {
  await Promise.all(agents.splice(0).map((a) => a.close()));
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

async function serve(handler: RequestListener): Promise<{ port: number; url: (path?: string) => string }> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { port, url: (path = "/") => `http://127.0.0.1:${port}${path}` };
}

function agent(options: Parameters<typeof createGuardedAgent>[0]) {
  const a = createGuardedAgent(options);
  agents.push(a);
  return a;
}

/** A resolver answering from a table, as DNS would: no real lookups in these tests. */
function fakeDns(table: Record<string, string[]>): ResolveAll {
  return (hostname, _options, callback) => {
    const addresses = table[hostname];
    if (!addresses) {
      callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }), []);
      return;
    }
    callback(
      null,
      addresses.map((address): LookupAddress => ({ address, family: address.includes(":") ? 6 : 4 })),
    );
  };
}

const ok: RequestListener = (_req, res) => res.end("hello");

describe("createGuardedAgent", () => {
  it("refuses a literal loopback IP before connecting", async () => {
    let hits = 0;
    const srv = await serve((req, res) => {
      hits++;
      ok(req, res);
    });
    const err = await request(srv.url(), { dispatcher: agent({ allowPrivate: false }) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DestinationRefusedError);
    expect(hits).toBe(0);
  });

  it("refuses a literal IPv6 loopback", async () => {
    const err = await request("http://[::1]:9/", { dispatcher: agent({ allowPrivate: false }) }).catch((e: unknown) => e);
    expect(isDestinationRefused(err)).toBe(true);
  });

  it("refuses a hostname whose resolved address is private (localhost, real resolver)", async () => {
    const srv = await serve(ok);
    const err = await request(`http://localhost:${srv.port}/`, { dispatcher: agent({ allowPrivate: false }) }).catch((e: unknown) => e);
    expect(isDestinationRefused(err)).toBe(true);
  });

  it("refuses a name that resolves to the metadata service (DNS rebinding)", async () => {
    const a = agent({ allowPrivate: false, resolve: fakeDns({ "innocent.test": ["169.254.169.254"] }) });
    const err = await request("http://innocent.test/latest/meta-data/", { dispatcher: a }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DestinationRefusedError);
    // The message says only that it was refused; the address stays on the error for logs.
    expect((err as Error).message).toBe(DESTINATION_REFUSED_MESSAGE);
    expect((err as Error).message).not.toMatch(/169\.254|innocent/);
    expect(err).toMatchObject({ hostname: "innocent.test", address: "169.254.169.254" });
  });

  it("connects only to the allowed addresses of a name with mixed records", async () => {
    const srv = await serve(ok);
    const a = agent({
      allowPrivate: false,
      resolve: fakeDns({ "mixed.test": ["127.0.0.2", "127.0.0.1"] }),
      refuseAddress: (ip) => ip !== "127.0.0.1",
    });
    const res = await request(`http://mixed.test:${srv.port}/`, { dispatcher: a });
    expect(await res.body.text()).toBe("hello");
  });

  it("passes DNS failures through unchanged", async () => {
    const a = agent({ allowPrivate: false, resolve: fakeDns({}) });
    const err = await request("http://nowhere.test/", { dispatcher: a }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "ENOTFOUND" });
  });

  it("reaches loopback when private destinations are allowed", async () => {
    const srv = await serve(ok);
    const a = agent({ allowPrivate: true });
    expect(await (await request(srv.url(), { dispatcher: a })).body.text()).toBe("hello");
    expect(await (await request(`http://localhost:${srv.port}/`, { dispatcher: a })).body.text()).toBe("hello");
  });

  it("reuses a keep-alive connection for the same origin", async () => {
    const sockets = new Set<unknown>();
    const srv = await serve((req, res) => {
      sockets.add(req.socket);
      res.end("x");
    });
    const a = agent({ allowPrivate: true });
    for (let i = 0; i < 3; i++) {
      await (await request(srv.url(), { dispatcher: a })).body.text();
      // Let undici hand the socket back to the pool before the next request is dispatched.
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(sockets.size).toBe(1);
  });
});

describe("guardedFetchText", () => {
  const limits = { timeoutMs: 5_000, maxBytes: 1_000 };

  it("returns status, headers and text", async () => {
    const srv = await serve((_req, res) => {
      res.setHeader("content-type", "text/javascript");
      res.end("module.exports = {}");
    });
    const got = await guardedFetchText(srv.url("/c.js"), { ...limits, agent: agent({ allowPrivate: true }) });
    expect(got).toMatchObject({ status: 200, text: "module.exports = {}", url: srv.url("/c.js") });
    expect(got.headers["content-type"]).toBe("text/javascript");
  });

  it("returns non-2xx answers for the caller to judge", async () => {
    const srv = await serve((_req, res) => {
      res.statusCode = 404;
      res.end("nope");
    });
    expect(await guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }) })).toMatchObject({
      status: 404,
      text: "nope",
    });
  });

  it("rejects a body over the limit announced by content-length", async () => {
    const srv = await serve((_req, res) => res.end("x".repeat(5_000)));
    await expect(guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }) })).rejects.toBeInstanceOf(
      ResponseTooLargeError,
    );
  });

  it("cuts off a chunked body once it passes the limit", async () => {
    const srv = await serve((_req, res) => {
      // No content-length: the limit must be enforced while streaming.
      res.write("x".repeat(600));
      setTimeout(() => res.end("y".repeat(600)), 10);
    });
    await expect(guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }) })).rejects.toBeInstanceOf(
      ResponseTooLargeError,
    );
  });

  it("follows up to three redirects, resolving relative locations", async () => {
    const srv = await serve((req, res) => {
      const n = Number(req.url?.slice(1) || "0");
      if (n < 3) {
        res.writeHead(302, { location: `/${n + 1}` });
        res.end();
      } else res.end(`arrived at ${n}`);
    });
    const got = await guardedFetchText(srv.url("/0"), { ...limits, agent: agent({ allowPrivate: true }) });
    expect(got).toMatchObject({ status: 200, text: "arrived at 3", url: srv.url("/3") });
  });

  it("gives up after three redirects", async () => {
    const srv = await serve((req, res) => {
      res.writeHead(301, { location: `${req.url}x` });
      res.end();
    });
    await expect(guardedFetchText(srv.url("/"), { ...limits, agent: agent({ allowPrivate: true }) })).rejects.toBeInstanceOf(RedirectError);
  });

  it("refuses a redirect to a non-http scheme", async () => {
    const srv = await serve((_req, res) => {
      res.writeHead(302, { location: "file:///etc/passwd" });
      res.end();
    });
    await expect(guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }) })).rejects.toThrow(/not an http\(s\) URL/);
  });

  it("re-checks every redirect hop through the guard", async () => {
    const target = await serve(ok);
    const srv = await serve((_req, res) => {
      res.writeHead(302, { location: `http://internal.test:${target.port}/` });
      res.end();
    });
    // 127.0.0.1 is allowed for the first hop; the second hop's name resolves to a refused address.
    const a = agent({
      allowPrivate: false,
      resolve: fakeDns({ "internal.test": ["127.0.0.9"] }),
      refuseAddress: (ip) => ip !== "127.0.0.1",
    });
    const err = await guardedFetchText(srv.url(), { ...limits, agent: a }).catch((e: unknown) => e);
    expect(isDestinationRefused(err)).toBe(true);
  });

  it("drops credentials when a redirect leaves the origin", async () => {
    const seen: (string | undefined)[] = [];
    const target = await serve((req, res) => {
      seen.push(req.headers.authorization);
      res.end("ok");
    });
    const srv = await serve((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(307, { location: `http://localhost:${target.port}/` });
      res.end();
    });
    await guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }), headers: { authorization: "Bearer s3cret" } });
    expect(seen).toEqual(["Bearer s3cret", undefined]);
  });

  it("times out the whole exchange", async () => {
    const srv = await serve((_req, res) => {
      res.write("partial");
      // Never ends: the deadline must cover the body too.
    });
    const started = Date.now();
    await expect(
      guardedFetchText(srv.url(), { timeoutMs: 200, maxBytes: 1_000, agent: agent({ allowPrivate: true }) }),
    ).rejects.toBeInstanceOf(FetchTimeoutError);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("sends method, headers and body, keeping them across a 307", async () => {
    const seen: string[] = [];
    const srv = await serve((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => {
        body += c.toString();
      });
      req.on("end", () => {
        seen.push(`${req.method} ${req.url} ${req.headers["content-type"]} ${body}`);
        if (req.url === "/a") {
          res.writeHead(307, { location: "/b" });
          res.end();
        } else res.end("done");
      });
    });
    const a = agent({ allowPrivate: true });
    const got = await guardedFetchText(srv.url("/a"), {
      ...limits,
      agent: a,
      method: "post",
      headers: { "content-type": "text/plain" },
      body: "hi",
    });
    expect(got).toMatchObject({ status: 200, statusText: "OK", text: "done" });
    expect(seen).toEqual(["POST /a text/plain hi", "POST /b text/plain hi"]);
  });

  it("turns a POST into a bodiless GET on a 303", async () => {
    const seen: string[] = [];
    const srv = await serve((req, res) => {
      seen.push(`${req.method} ${req.url} ${req.headers["content-type"] ?? "-"}`);
      req.resume();
      if (req.url === "/a") {
        res.writeHead(303, { location: "/b" });
        res.end();
      } else res.end("done");
    });
    await guardedFetchText(srv.url("/a"), {
      ...limits,
      agent: agent({ allowPrivate: true }),
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: "hi",
    });
    expect(seen).toEqual(["POST /a text/plain", "GET /b -"]);
  });

  it("rejects with the caller's abort reason when its signal fires", async () => {
    let arrived!: () => void;
    const reached = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const srv = await serve(() => arrived());
    const controller = new AbortController();
    const pending = guardedFetchText(srv.url(), { ...limits, agent: agent({ allowPrivate: true }), signal: controller.signal });
    await reached;
    const reason = new Error("run ended");
    controller.abort(reason);
    await expect(pending).rejects.toBe(reason);
  });

  it("rejects a URL that is not http(s)", async () => {
    await expect(guardedFetchText("ftp://example.com/x", { ...limits, agent: agent({ allowPrivate: true }) })).rejects.toThrow(TypeError);
  });
});
