import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import { FUNCTION_MARKER, normalizeProps, type PropDefinition, validateConfiguredProps } from "../../../src/domain/props.js";

const opts = { timerMinIntervalSeconds: 15 };
const validate = (defs: PropDefinition[], input: unknown) => validateConfiguredProps(defs, input, opts);
const rejects = (defs: PropDefinition[], input: unknown, message: RegExp) => {
  expect(() => validate(defs, input)).toThrowError(ValidationError);
  expect(() => validate(defs, input)).toThrowError(message);
};

describe("normalizeProps", () => {
  it("returns no props for a component without props", () => {
    expect(normalizeProps(undefined)).toEqual([]);
    expect(normalizeProps(null)).toEqual([]);
    expect(normalizeProps({})).toEqual([]);
  });

  it("expands shorthand props in declaration order", () => {
    expect(normalizeProps({ http: "$.interface.http", db: "$.service.db", secret: "string" })).toEqual([
      { name: "http", type: "$.interface.http" },
      { name: "db", type: "$.service.db" },
      { name: "secret", type: "string" },
    ]);
  });

  it("keeps only the documented keys", () => {
    const [p] = normalizeProps({
      greeting: {
        type: "string",
        label: "Greeting",
        description: "What to say",
        optional: true,
        default: "hello",
        secret: false,
        extra: 1,
        app: "x",
      },
    });
    expect(p).toEqual({
      name: "greeting",
      type: "string",
      label: "Greeting",
      description: "What to say",
      optional: true,
      default: "hello",
      secret: false,
    });
  });

  it("keeps min, max and literal options", () => {
    const [p] = normalizeProps({ n: { type: "integer", min: 1, max: 10, options: [1, 2, { label: "Three", value: 3 }] } });
    expect(p).toEqual({ name: "n", type: "integer", min: 1, max: 10, options: [1, 2, { label: "Three", value: 3 }] });
  });

  it("turns function options into remoteOptions", () => {
    const [p] = normalizeProps({ repo: { type: "string", options: FUNCTION_MARKER } });
    expect(p).toEqual({ name: "repo", type: "string", remoteOptions: true });
  });

  it("drops defaults and options that contain functions", () => {
    const [p] = normalizeProps({ x: { type: "object", default: { f: FUNCTION_MARKER }, options: [FUNCTION_MARKER] } });
    expect(p).toEqual({ name: "x", type: "object" });
  });

  it("keeps customResponse on HTTP props only", () => {
    expect(normalizeProps({ http: { type: "$.interface.http", customResponse: true } })).toEqual([
      { name: "http", type: "$.interface.http", customResponse: true },
    ]);
    expect(normalizeProps({ s: { type: "string", customResponse: true } })).toEqual([{ name: "s", type: "string" }]);
  });

  it("keeps a timer's default", () => {
    expect(normalizeProps({ timer: { type: "$.interface.timer", default: { intervalSeconds: 60 } } })).toEqual([
      { name: "timer", type: "$.interface.timer", default: { intervalSeconds: 60 } },
    ]);
  });

  it("ignores attributes of the wrong type", () => {
    const [p] = normalizeProps({ s: { type: "string", label: 5, optional: "yes", min: "1", max: Number.NaN } });
    expect(p).toEqual({ name: "s", type: "string" });
  });

  it("gives propDefinition props the type any", () => {
    expect(normalizeProps({ repo: { propDefinition: [{}, "repo"] } })).toEqual([{ name: "repo", type: "any" }]);
  });

  it("rejects props that are not a type name or an object with a type", () => {
    expect(() => normalizeProps([])).toThrowError(/props must be an object/);
    expect(() => normalizeProps({ x: 5 })).toThrowError(/prop x/);
    expect(() => normalizeProps({ x: FUNCTION_MARKER })).toThrowError(/prop x must have a type/);
    expect(() => normalizeProps({ x: { label: "X" } })).toThrowError(/prop x must have a type/);
    expect(() => normalizeProps({ x: { type: "" } })).toThrowError(ValidationError);
  });

  it("rejects prop names that would alter an object's prototype", () => {
    const raw = JSON.parse('{"__proto__": "string"}');
    expect(() => normalizeProps(raw)).toThrowError(/__proto__/);
  });
});

describe("validateConfiguredProps", () => {
  const defs = normalizeProps({
    url: { type: "string", label: "Feed URL" },
    count: { type: "integer", optional: true, default: 3 },
  });

  it("returns the given values and fills defaults", () => {
    expect(validate(defs, { url: "https://x" })).toEqual({ url: "https://x", count: 3 });
    expect(validate(defs, { url: "https://x", count: 7 })).toEqual({ url: "https://x", count: 7 });
  });

  it("names a missing required prop without mentioning component_url", () => {
    rejects(defs, {}, /^configured_props\.url is required$/);
    rejects(defs, undefined, /configured_props\.url/);
    expect(() => validate(defs, {})).not.toThrowError(/component_url/);
  });

  it("treats null as not given", () => {
    rejects(defs, { url: null }, /url is required/);
    expect(validate(defs, { url: "u", count: null })).toEqual({ url: "u", count: 3 });
  });

  it("rejects unknown props by name", () => {
    rejects(defs, { url: "u", nope: 1 }, /configured_props\.nope/);
  });

  it("rejects input that is not an object", () => {
    rejects(defs, "x", /configured_props must be an object/);
    rejects(defs, [1], /configured_props must be an object/);
  });

  it("does not mistake inherited properties for given values", () => {
    const d = normalizeProps({ constructor: "string" });
    rejects(d, {}, /configured_props\.constructor is required/);
  });

  it("omits optional props without default", () => {
    expect(validate(normalizeProps({ s: { type: "string", optional: true } }), {})).toEqual({});
  });

  it("does not share a default object between sources", () => {
    const d = normalizeProps({ o: { type: "object", default: { a: 1 } } });
    const out = validate(d, {}) as { o: { a: number } };
    out.o.a = 2;
    expect(validate(d, {})).toEqual({ o: { a: 1 } });
  });

  it.each([
    ["string", 5, /must be a string/],
    ["integer", 1.5, /must be an integer/],
    ["integer", "3", /must be an integer/],
    ["boolean", "true", /must be a boolean/],
    ["object", [1], /must be a object/],
    ["object", "x", /must be a object/],
    ["string[]", "a", /must be an array of strings/],
    ["string[]", ["a", 1], /configured_props\.p\[1\] must be a string/],
    ["integer[]", [1, 2.5], /configured_props\.p\[1\] must be an integer/],
  ])("rejects a %s prop given %j", (type, value, message) => {
    rejects([{ name: "p", type }], { p: value }, message);
  });

  it.each([
    ["string", "x"],
    ["integer", -4],
    ["boolean", false],
    ["object", { a: [1] }],
    ["string[]", ["a", "b"]],
    ["integer[]", []],
    ["any", [1, "x", null]],
    ["app", { whatever: true }],
    ["$.interface.apphook", "anything"],
  ])("accepts a %s prop given %j", (type, value) => {
    expect(validate([{ name: "p", type }], { p: value })).toEqual({ p: value });
  });

  it("does not require app-ish props", () => {
    expect(validate([{ name: "github", type: "app" }], {})).toEqual({});
  });

  it("checks min and max of integers", () => {
    const d: PropDefinition[] = [{ name: "n", type: "integer", min: 1, max: 10 }];
    rejects(d, { n: 0 }, /configured_props\.n must be at least 1/);
    rejects(d, { n: 11 }, /must be at most 10/);
    expect(validate(d, { n: 10 })).toEqual({ n: 10 });
    rejects([{ name: "n", type: "integer[]", min: 1 }], { n: [1, 0] }, /n\[1\] must be at least 1/);
  });

  it("checks literal options, plain or {label, value}", () => {
    const d: PropDefinition[] = [{ name: "c", type: "string", options: ["red", { label: "Blue", value: "blue" }] }];
    expect(validate(d, { c: "blue" })).toEqual({ c: "blue" });
    rejects(d, { c: "green" }, /configured_props\.c must be one of: "red", "blue"/);
    const many: PropDefinition[] = [{ name: "c", type: "string[]", options: ["a", "b"] }];
    rejects(many, { c: ["a", "z"] }, /c\[1\] must be one of/);
  });

  it("does not check remote options", () => {
    expect(validate([{ name: "c", type: "string", remoteOptions: true }], { c: "any" })).toEqual({ c: "any" });
  });

  it("omits HTTP and db props and ignores values given for them", () => {
    const d = normalizeProps({ http: "$.interface.http", db: "$.service.db" });
    expect(validate(d, {})).toEqual({});
    expect(validate(d, { http: { endpoint_url: "http://evil" }, db: { x: 1 } })).toEqual({});
  });
});

describe("validateConfiguredProps for timers", () => {
  const timer = normalizeProps({ timer: { type: "$.interface.timer", default: { intervalSeconds: 60 } } });
  const bare: PropDefinition[] = [{ name: "timer", type: "$.interface.timer" }];

  it("stores an interval as {cron, interval_seconds}", () => {
    expect(validate(timer, { timer: { intervalSeconds: 30 } })).toEqual({ timer: { cron: null, interval_seconds: 30 } });
  });

  it("uses the default when the timer is not given", () => {
    expect(validate(timer, {})).toEqual({ timer: { cron: null, interval_seconds: 60 } });
  });

  it("accepts its own stored shape back", () => {
    expect(validate(timer, { timer: { cron: null, interval_seconds: 45 } })).toEqual({ timer: { cron: null, interval_seconds: 45 } });
  });

  it("requires a timer without default", () => {
    rejects(bare, {}, /configured_props\.timer is required/);
  });

  it("rejects intervals under the minimum or not whole seconds", () => {
    rejects(timer, { timer: { intervalSeconds: 14 } }, /intervalSeconds must be at least 15/);
    rejects(timer, { timer: { intervalSeconds: 20.5 } }, /must be an integer/);
    rejects(timer, { timer: { intervalSeconds: "60" } }, /must be an integer/);
    expect(validateConfiguredProps(timer, { timer: { intervalSeconds: 1 } }, { timerMinIntervalSeconds: 1 })).toEqual({
      timer: { cron: null, interval_seconds: 1 },
    });
  });

  it("validates the default like a given value", () => {
    const low = normalizeProps({ timer: { type: "$.interface.timer", default: { intervalSeconds: 5 } } });
    rejects(low, {}, /timer\.intervalSeconds must be at least 15/);
  });

  it("stores a cron expression", () => {
    expect(validate(bare, { timer: { cron: " */5 * * * * " } })).toEqual({ timer: { cron: "*/5 * * * *", interval_seconds: null } });
    expect(validate(bare, { timer: { cron: "@daily" } })).toEqual({ timer: { cron: "@daily", interval_seconds: null } });
  });

  it.each(["", "* * *", "61 * * * *", "not a cron", "* * * * * * *", "0 0 30 2 *"])("rejects the cron %j", (cron) => {
    rejects(bare, { timer: { cron } }, /configured_props\.timer\.cron/);
  });

  it("rejects a cron that fires more often than the minimum interval", () => {
    rejects(bare, { timer: { cron: "*/5 * * * * *" } }, /more often than every 15 seconds/);
    expect(validate(bare, { timer: { cron: "*/30 * * * * *" } })).toEqual({ timer: { cron: "*/30 * * * * *", interval_seconds: null } });
  });

  it("rejects a timer with both or neither of interval and cron", () => {
    rejects(bare, { timer: { intervalSeconds: 60, cron: "* * * * *" } }, /either intervalSeconds or cron/);
    rejects(bare, { timer: {} }, /intervalSeconds or cron/);
    rejects(bare, { timer: 60 }, /must be an object/);
    rejects(bare, { timer: { cron: 5 } }, /cron must be a string/);
  });
});
