import { describe, expect, it } from "vitest";
import { originOf, sessionRequestProblem } from "../../../../src/api/middleware/admin-session.js";

/**
 * When a request carrying the dashboard's cookie may change queues (`sessionRequestProblem`): only
 * from the dashboard's own origin, told by Sec-Fetch-Site or, where browsers leave that out (plain
 * HTTP to another host), by Origin.
 */

const OWN = ["http://127.0.0.1:3000", "https://relay.example.com"];
const ask = (method: string, fetchSite: string, origin: string) => sessionRequestProblem({ method, fetchSite, origin }, OWN);

describe("sessionRequestProblem", () => {
  it.each(["GET", "HEAD"])("lets %s through whatever the headers say (reading changes nothing)", (method) => {
    for (const site of ["", "cross-site", "same-site", "none"]) expect(ask(method, site, "null")).toBeUndefined();
  });

  it.each(["PUT", "POST", "PATCH", "DELETE", "OPTIONS", "put"])("lets %s through from the same origin", (method) => {
    expect(ask(method, "same-origin", "")).toBeUndefined();
    expect(ask(method, "same-origin", "http://elsewhere.example")).toBeUndefined();
    expect(ask(method, "", "http://127.0.0.1:3000")).toBeUndefined();
    expect(ask(method, "", "https://relay.example.com")).toBeUndefined();
  });

  it.each([
    ["same-site", "http://127.0.0.1:3001"],
    ["cross-site", "null"],
    ["none", ""],
    ["same-origin ", ""],
    ["SAME-ORIGIN", ""],
    ["garbage", "http://127.0.0.1:3000"],
  ])("refuses Sec-Fetch-Site %j, even with an own Origin", (site, origin) => {
    expect(ask("PUT", site, origin)).toMatch(/came from another site/);
  });

  it.each([
    ["another port", "http://127.0.0.1:3001"],
    ["an opaque origin", "null"],
    ["a sibling host", "https://hooks.example.com"],
    ["another scheme", "http://relay.example.com"],
    ["a path after the origin", "https://relay.example.com/"],
  ])("refuses an Origin of %s when Sec-Fetch-Site is absent", (_what, origin) => {
    expect(ask("POST", "", origin)).toMatch(/another origin/);
  });

  it("refuses a call that says neither (no browser sent it: scripts use the Bearer header)", () => {
    expect(ask("PUT", "", "")).toMatch(/scripts use the Bearer header.*neither Sec-Fetch-Site nor Origin/);
  });
});

describe("originOf", () => {
  it.each([
    ["https://relay.example.com/some/path?q=1", "https://relay.example.com"],
    ["https://RELAY.example.com:443", "https://relay.example.com"],
    ["http://127.0.0.1:3000", "http://127.0.0.1:3000"],
    ["http://[::1]:80/", "http://[::1]"],
  ])("serializes %s as %s", (url, origin) => {
    expect(originOf(url)).toBe(origin);
  });

  it.each(["", "not a url", "http://[::1", "data:text/plain,x", "file:///etc/passwd"])("has no origin for %j", (url) => {
    expect(originOf(url)).toBeUndefined();
  });
});
