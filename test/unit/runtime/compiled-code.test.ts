import { describe, expect, it } from "vitest";
import { CompiledCodeCache, codeKey } from "../../../src/runtime/compiled-code.js";

/** The daemon's compiled-code cache (runtime/compiled-code.ts): bounded by bytes, least recently used out. */

describe("CompiledCodeCache", () => {
  it("keys code by component id and code hash", () => {
    expect(codeKey({ id: "sc_1", code_hash: "ab" })).toBe("sc_1:ab");
    expect(codeKey({ id: "sc_1", code_hash: "cd" })).not.toBe(codeKey({ id: "sc_1", code_hash: "ab" }));
  });

  it("loads a key once, then answers from memory", async () => {
    const cache = new CompiledCodeCache(1000);
    let loads = 0;
    const load = async () => {
      loads++;
      return "code";
    };
    expect(await cache.get("k", load)).toBe("code");
    expect(await cache.get("k", load)).toBe("code");
    expect(loads).toBe(1);
    expect(cache.misses).toBe(1);
  });

  it("shares one load between concurrent misses, and keeps no failed load", async () => {
    const cache = new CompiledCodeCache(1000);
    let loads = 0;
    const slow = () =>
      new Promise<string>((resolve) => {
        loads++;
        setImmediate(() => resolve("x"));
      });
    expect(await Promise.all([cache.get("k", slow), cache.get("k", slow)])).toEqual(["x", "x"]);
    expect(loads).toBe(1);
    await expect(cache.get("bad", async () => Promise.reject(new Error("gone")))).rejects.toThrow("gone");
    expect(await cache.get("bad", async () => "back")).toBe("back");
  });

  it("stays within its bytes, dropping the least recently used, and keeps nothing larger than the budget", async () => {
    const cache = new CompiledCodeCache(10);
    await cache.get("a", async () => "aaaa");
    await cache.get("b", async () => "bbbb");
    expect(cache.peek("a")).toBe("aaaa"); // a is now the most recently used
    await cache.get("c", async () => "cccc");
    expect(cache.bytes).toBeLessThanOrEqual(10);
    expect(cache.peek("b")).toBeUndefined();
    expect(cache.peek("a")).toBe("aaaa");
    expect(cache.peek("c")).toBe("cccc");
    // UTF-8 bytes, not characters: 2 characters of 3 bytes each do not fit beside 8 bytes.
    cache.keep("d", "€€");
    expect(cache.bytes).toBe(10);
    expect(cache.peek("a")).toBeUndefined();
    expect(await cache.get("huge", async () => "h".repeat(11))).toBe("h".repeat(11));
    expect(cache.peek("huge")).toBeUndefined();
    expect(cache.peek("d")).toBe("€€");
    expect(cache.peek("c")).toBe("cccc");
  });
});
