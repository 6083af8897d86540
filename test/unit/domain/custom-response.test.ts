import { describe, expect, it } from "vitest";
import {
  CONNECTION_HEADERS,
  checkCustomResponse,
  DAEMON_OWNED_HEADERS,
  ENDPOINT_ANSWER_HEADERS,
} from "../../../src/domain/custom-response.js";

describe("checkCustomResponse", () => {
  it.each([200, 201, 204, 299, 301, 404, 418, 500, 599])("accepts the final status %i", (status) => {
    expect(checkCustomResponse(status, {})).toEqual({ ok: true, status, headers: {}, dropped: [] });
  });

  it.each([100, 101, 102, 103, 199, 0, -1, 99, 600, 999, 200.5, Number.NaN, Number.POSITIVE_INFINITY])(
    "refuses the status %s, naming it and the allowed range",
    (status) => {
      const r = checkCustomResponse(status, { "x-a": "1" });
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(new RegExp(`status ${String(status)} .*200 to 599`));
    },
  );

  it("drops every hop-by-hop and framing header, in any case, and keeps the others", () => {
    const headers: Record<string, string> = {
      "Transfer-Encoding": "chunked",
      "content-length": "1",
      Connection: "close",
      "keep-alive": "timeout=1",
      Upgrade: "websocket",
      TE: "trailers",
      trailer: "x-t",
      "proxy-authenticate": "Basic",
      "Proxy-Connection": "keep-alive",
      "proxy-anything": "x",
      "http2-settings": "AAA",
      "content-type": "text/plain",
      "x-kept": "yes",
      "cache-control": "no-store",
    };
    const r = checkCustomResponse(200, headers);
    expect(r).toMatchObject({ ok: true, headers: { "content-type": "text/plain", "x-kept": "yes", "cache-control": "no-store" } });
    if (!r.ok) return;
    expect(Object.keys(r.headers).sort()).toEqual(["cache-control", "content-type", "x-kept"]);
    expect([...r.dropped].sort()).toEqual(
      [
        "connection",
        "content-length",
        "http2-settings",
        "keep-alive",
        "proxy-anything",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
      ].sort(),
    );
    for (const name of CONNECTION_HEADERS) expect(r.headers[name]).toBeUndefined();
  });

  it("drops the headers the component's own Connection header names as hop-by-hop", () => {
    const r = checkCustomResponse(200, { connection: "X-Hop, , x-other", "x-hop": "1", "X-Other": "2", "x-end": "3" });
    expect(r).toMatchObject({ ok: true, headers: { "x-end": "3" } });
    if (r.ok) expect(Object.keys(r.headers)).toEqual(["x-end"]);
  });

  it("drops names that are not tokens and values that could split the response", () => {
    const r = checkCustomResponse(200, {
      "bad name": "x",
      "x-ü": "x",
      "": "x",
      "x-crlf": "a\r\nset-cookie: evil=1",
      "x-lf": "a\nb",
      "x-nul": "a\u0000b",
      "x-fine": "tab\tand latin-1 é",
    });
    expect(r.ok && r.headers).toEqual({ "x-fine": "tab\tand latin-1 é" });
    expect(r.ok && r.dropped.length).toBe(6);
  });

  it("drops the daemon's own headers and cookies, in any case, whatever their value", () => {
    const r = checkCustomResponse(200, {
      "Content-Security-Policy": "default-src *",
      "x-content-type-options": "",
      "REFERRER-POLICY": "unsafe-url",
      "Set-Cookie": "tributary_admin=planted; Path=/admin/queues",
      "content-security-policy-report-only": "default-src 'none'",
      "content-type": "text/html",
    });
    expect(r.ok && r.headers).toEqual({ "content-security-policy-report-only": "default-src 'none'", "content-type": "text/html" });
    expect(r.ok && [...r.dropped].sort()).toEqual(["content-security-policy", "referrer-policy", "set-cookie", "x-content-type-options"]);
  });
});

describe("ENDPOINT_ANSWER_HEADERS", () => {
  it("sandboxes the page into an opaque origin, never granting the origin back nor popups", () => {
    const csp = ENDPOINT_ANSWER_HEADERS["content-security-policy"] ?? "";
    const [directive, ...tokens] = csp.split(/\s+/);
    expect(directive).toBe("sandbox");
    expect(tokens).not.toContain("allow-same-origin");
    expect(tokens.filter((t) => t.startsWith("allow-popups") || t.startsWith("allow-top-navigation"))).toEqual([]);
    expect(ENDPOINT_ANSWER_HEADERS).toMatchObject({ "x-content-type-options": "nosniff", "referrer-policy": "no-referrer" });
  });

  it("are all the daemon's own: a component can set none of them", () => {
    for (const name of Object.keys(ENDPOINT_ANSWER_HEADERS)) {
      expect(name).toBe(name.toLowerCase());
      expect(DAEMON_OWNED_HEADERS.has(name), name).toBe(true);
    }
  });
});
