import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../../src/domain/errors.js";
import { DEFAULT_VERSION, toMeta } from "../../../../src/runtime/component/meta.js";

const base = { key: "k", name: "N", version: "1.0.0", description: "d", dedupe: "unique", props: {}, hooks: ["deploy"], hasRun: true };

describe("toMeta", () => {
  it("copies a complete description", () => {
    expect(toMeta(base)).toEqual({
      key: "k",
      name: "N",
      version: "1.0.0",
      description: "d",
      dedupe: "unique",
      props: [],
      hooks: ["deploy"],
      hasRun: true,
    });
  });

  it("falls back to the key for the name", () => {
    expect(toMeta({ ...base, name: null }).name).toBe("k");
  });

  it("needs a name or a key", () => {
    expect(() => toMeta({ ...base, name: undefined, key: undefined })).toThrowError(/needs a name/);
  });

  it(`defaults the version to ${DEFAULT_VERSION} and accepts a numeric one`, () => {
    expect(toMeta({ ...base, version: undefined }).version).toBe("0.0.1");
    expect(toMeta({ ...base, version: 2 }).version).toBe("2");
  });

  it("defaults missing optional fields to null", () => {
    const m = toMeta({ name: "only", hasRun: true });
    expect(m).toEqual({ key: null, name: "only", version: "0.0.1", description: null, dedupe: null, props: [], hooks: [], hasRun: true });
  });

  it("rejects an unknown dedupe and fields of the wrong type", () => {
    expect(() => toMeta({ ...base, dedupe: "sometimes" })).toThrowError(ValidationError);
    expect(() => toMeta({ ...base, name: 5 })).toThrowError(/name must be a string/);
    expect(() => toMeta({ ...base, key: {} })).toThrowError(/key must be a string/);
  });

  it("normalizes props", () => {
    expect(toMeta({ ...base, props: { http: "$.interface.http" } }).props).toEqual([{ name: "http", type: "$.interface.http" }]);
  });
});
