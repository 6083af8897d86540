import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import {
  isHttpUrl,
  MAX_URL_LENGTH,
  rawComponentUrl,
  validateWebhookUrl,
  privateDestinationProblem,
} from "../../../src/domain/url-rules.js";

describe("validateWebhookUrl", () => {
  it.each([
    "https://example.com",
    "http://example.com/hooks/1?x=y#frag",
    "http://localhost:8080/hook",
    "http://127.0.0.1:3000",
    "http://[::1]:3000/x",
    "https://user:pass@example.com/x",
    "HTTPS://Example.COM/Path",
  ])("accepts %s and returns it unchanged", (url) => {
    expect(validateWebhookUrl(url)).toBe(url);
  });

  it.each([
    "example.com",
    "mysql://user:pass@host:3306",
    "ftp://example.com/x",
    "http://",
    "https:///path",
    "http:\\\\example.com",
    "http:example.com",
    "http://user@/x",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "",
    " https://example.com",
    "https://example.com/a b",
    "https://exa\nmple.com",
  ])("rejects %j", (url) => {
    expect(() => validateWebhookUrl(url)).toThrow(ValidationError);
  });

  it.each([undefined, null, 42, {}, ["https://example.com"]])("rejects the non-string %j", (value) => {
    expect(() => validateWebhookUrl(value)).toThrow(/url must be a string/);
  });

  it("rejects URLs over 2048 characters and accepts one at the limit", () => {
    const prefix = "https://example.com/";
    expect(validateWebhookUrl(prefix + "a".repeat(MAX_URL_LENGTH - prefix.length))).toHaveLength(MAX_URL_LENGTH);
    expect(() => validateWebhookUrl(prefix + "a".repeat(MAX_URL_LENGTH - prefix.length + 1))).toThrow(/2048/);
  });

  it("names the parameter in the message, url by default", () => {
    expect(() => validateWebhookUrl("nope")).toThrow(/^url /);
    expect(() => validateWebhookUrl("nope", "trigger_url")).toThrow(/^trigger_url /);
    try {
      validateWebhookUrl("nope");
    } catch (err) {
      expect(err).toMatchObject({ status: 400, code: "invalid_parameter" });
    }
  });
});

describe("isHttpUrl", () => {
  it("answers without throwing", () => {
    expect(isHttpUrl("https://example.com")).toBe(true);
    expect(isHttpUrl("https:///path")).toBe(false);
    expect(isHttpUrl("")).toBe(false);
  });
});

describe("rawComponentUrl", () => {
  it("rewrites GitHub blob URLs to raw.githubusercontent.com", () => {
    expect(
      rawComponentUrl("https://github.com/PipedreamHQ/pipedream/blob/master/components/http/sources/new-requests/new-requests.js"),
    ).toBe("https://raw.githubusercontent.com/PipedreamHQ/pipedream/master/components/http/sources/new-requests/new-requests.js");
    expect(rawComponentUrl("https://www.github.com/o/r/blob/v1.2.0/src/a.mjs?plain=1#L3")).toBe(
      "https://raw.githubusercontent.com/o/r/v1.2.0/src/a.mjs",
    );
  });

  it.each([
    "https://raw.githubusercontent.com/o/r/main/a.js",
    "https://github.com/o/r/tree/main/src",
    "https://github.com/o/r",
    "https://gist.github.com/o/abc",
    "https://example.com/o/r/blob/main/a.js",
    "not a url",
  ])("leaves %s unchanged", (url) => {
    expect(rawComponentUrl(url)).toBe(url);
  });
});

describe("privateDestinationProblem", () => {
  const refusedIps: string[] = [];
  const isPrivateIp = (ip: string) => {
    refusedIps.push(ip);
    return ip.startsWith("127.") || ip === "::1" || ip === "10.0.0.1";
  };

  it("refuses localhost names and IP literals the address rule refuses, naming the rule", () => {
    for (const [url, host] of [
      ["http://localhost:3000/x", "localhost"],
      ["http://LocalHost./x", "localhost"],
      ["http://a.b.localhost/x", "a.b.localhost"],
      ["http://127.0.0.1/x", "127.0.0.1"],
      ["http://127.1/x", "127.0.0.1"],
      ["http://0x7f.0.0.1/x", "127.0.0.1"],
      ["http://[::1]:80/x", "::1"],
      ["http://10.0.0.1/x", "10.0.0.1"],
    ] as const) {
      const problem = privateDestinationProblem(url, isPrivateIp);
      expect(problem, url).toMatch(new RegExp(`^names ${host.replace(/\./g, "\\.")}, `));
      expect(problem).toMatch(/ALLOW_PRIVATE_DESTINATIONS is off/);
    }
  });

  it("leaves names to the connect-time guard and passes public literals", () => {
    refusedIps.length = 0;
    for (const url of ["https://example.com/x", "http://localhost.example/x", "http://93.184.216.34/x", "http://[2001:db8::1]/x"])
      expect(privateDestinationProblem(url, isPrivateIp), url).toBeUndefined();
    // Only the literals were asked about; names are never resolved here.
    expect(refusedIps).toEqual(["93.184.216.34", "2001:db8::1"]);
  });
});
