import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../../src/config/load.js";
import { envSchema } from "../../../src/config/schema.js";
import { parseDuration, parseDurationList } from "../../../src/domain/duration.js";

describe("loadConfig", () => {
  it("applies the documented defaults", () => {
    const c = loadConfig({});
    expect(c.port).toBe(3000);
    expect(c.host).toBe("0.0.0.0");
    expect(c.publicUrl).toBe("http://localhost:3000");
    expect(c.roles).toEqual(["api", "worker", "scheduler"]);
    expect(c.allowPrivateDestinations).toBe(false);
    expect(c.deliveryRetryScheduleMs).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]);
    expect(c.deliveryTimeoutMs).toBe(15_000);
    expect(c.timerMinIntervalSeconds).toBe(15);
    expect(c.circuit).toEqual({ failureThreshold: 10, cooldownMs: 30_000 });
    expect(c.logLevel).toBe("info");
    expect(Object.isFrozen(c)).toBe(true);
  });
  it("reads overrides and treats empty strings as unset", () => {
    const c = loadConfig({
      PORT: "8080",
      PUBLIC_URL: "https://relay.example.com/",
      ROLES: "api, worker",
      ALLOW_PRIVATE_DESTINATIONS: "true",
      REDIS_URL: "",
    });
    expect(c.port).toBe(8080);
    expect(c.publicUrl).toBe("https://relay.example.com");
    expect(c.roles).toEqual(["api", "worker"]);
    expect(c.allowPrivateDestinations).toBe(true);
    expect(c.redisUrl).toBeUndefined();
    expect(loadConfig({ CIRCUIT_FAILURE_THRESHOLD: "3", CIRCUIT_COOLDOWN: "1h" }).circuit).toEqual({
      failureThreshold: 3,
      cooldownMs: 3_600_000,
    });
  });
  it("builds endpoint URLs from PUBLIC_URL unless ENDPOINT_URL (or ENDPOINT_PORT) gives endpoints an origin of their own", () => {
    expect(loadConfig({ PUBLIC_URL: "https://relay.example.com" })).toMatchObject({
      endpointUrl: "https://relay.example.com",
      endpointPort: undefined,
    });
    expect(loadConfig({ PUBLIC_URL: "https://relay.example.com", ENDPOINT_URL: "https://hooks.example.com/" })).toMatchObject({
      publicUrl: "https://relay.example.com",
      endpointUrl: "https://hooks.example.com",
    });
    expect(loadConfig({ ENDPOINT_PORT: "3001" })).toMatchObject({ endpointUrl: "http://localhost:3001", endpointPort: 3001 });
    // Behind a proxy the advertised URL's port is not the listener's.
    expect(loadConfig({ ENDPOINT_PORT: "3001", ENDPOINT_URL: "https://hooks.example.com" })).toMatchObject({
      endpointUrl: "https://hooks.example.com",
      endpointPort: 3001,
    });
  });
  it.each([
    [
      { PUBLIC_URL: "https://relay.example.com", ENDPOINT_URL: "https://relay.example.com/hooks" },
      /invalid ENDPOINT_URL: it names PUBLIC_URL's origin/,
    ],
    [
      { PUBLIC_URL: "https://relay.example.com:443", ENDPOINT_URL: "https://RELAY.example.com" },
      /invalid ENDPOINT_URL: it names PUBLIC_URL's origin/,
    ],
    [{ PORT: "3000", ENDPOINT_URL: "http://localhost:3000" }, /invalid ENDPOINT_URL: it names PUBLIC_URL's origin/],
    [{ ENDPOINT_URL: "ftp://hooks.example.com" }, /invalid ENDPOINT_URL: accepts an http\(s\) URL/],
    [{ ENDPOINT_URL: "http://[::1" }, /invalid ENDPOINT_URL: accepts an http\(s\) URL/],
    [{ PORT: "3000", ENDPOINT_PORT: "3000" }, /invalid ENDPOINT_PORT: 3000 is PORT too/],
    [{ OPS_PORT: "9090", ENDPOINT_PORT: "9090" }, /invalid ENDPOINT_PORT: 9090 is OPS_PORT too/],
    [{ ENDPOINT_PORT: "70000" }, /invalid ENDPOINT_PORT: accepts/],
  ])("refuses endpoint settings that share the dashboard's origin or another listener's port: %o", (env, message) => {
    expect(() => loadConfig(env)).toThrowError(ConfigError);
    expect(() => loadConfig(env)).toThrowError(message);
  });
  it.each([
    ["PORT", "abc"],
    ["ROLES", "api,cook"],
    ["DELIVERY_RETRY_SCHEDULE", "5s,soon"],
    ["DELIVERY_TIMEOUT_MS", "-1"],
    ["LOG_LEVEL", "loud"],
    ["LOG_FORMAT", "fancy"],
    ["REDIS_URL", "http://x"],
    ["ALLOW_PRIVATE_DESTINATIONS", "maybe"],
    ["CIRCUIT_FAILURE_THRESHOLD", "0"],
    ["CIRCUIT_COOLDOWN", "2h"],
    ["CIRCUIT_COOLDOWN", "0s"],
    ["CIRCUIT_COOLDOWN", "soon"],
  ])("names %s when it is invalid", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrowError(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrowError(new RegExp(`invalid ${name}: accepts`));
  });
  it("refuses a DELIVERY_RETRY_SCHEDULE whose delays add up to more than MAX_RETRY_SPAN_HOURS", () => {
    expect(loadConfig({}).maxRetrySpanHours).toBe(72);
    expect(() => loadConfig({ DELIVERY_RETRY_SCHEDULE: "50h,30h" })).toThrowError(
      /invalid DELIVERY_RETRY_SCHEDULE: its delays add up to 80h, more than the 72h .*raise MAX_RETRY_SPAN_HOURS/,
    );
    expect(loadConfig({ DELIVERY_RETRY_SCHEDULE: "50h,30h", MAX_RETRY_SPAN_HOURS: "80" }).deliveryRetryScheduleMs).toEqual([
      180_000_000, 108_000_000,
    ]);
    expect(() => loadConfig({ MAX_RETRY_SPAN_HOURS: "0" })).toThrowError(/invalid MAX_RETRY_SPAN_HOURS: accepts/);
  });
  it("config/defaults.env documents every setting with the schema's default", () => {
    const text = readFileSync(path.resolve(import.meta.dirname, "../../../config/defaults.env"), "utf8");
    const documented = Object.fromEntries(
      text
        .split("\n")
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
    );
    expect(Object.keys(documented).sort()).toEqual(Object.keys(envSchema.shape).sort());
    const fromDefaults = loadConfig({});
    const fromFile = loadConfig(documented);
    expect(fromFile).toEqual(fromDefaults);
  });
});

describe("durations", () => {
  it("parses ms, s, m and h", () => {
    expect(parseDuration("200ms")).toBe(200);
    expect(parseDuration("5s")).toBe(5000);
    expect(parseDuration("30m")).toBe(1_800_000);
    expect(parseDuration("2h")).toBe(7_200_000);
    expect(parseDurationList("200ms,400ms,800ms")).toEqual([200, 400, 800]);
  });
  it("rejects other forms", () => {
    for (const bad of ["5", "1.5s", "5d", "s", "", "-1s"]) expect(parseDuration(bad)).toBeUndefined();
    expect(parseDurationList("")).toBeUndefined();
    expect(parseDurationList("5s,")).toBeUndefined();
  });
});
