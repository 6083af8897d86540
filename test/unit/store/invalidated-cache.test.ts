import { describe, expect, it } from "vitest";
import { InvalidatedCache } from "../../../src/store/invalidated-cache.js";

function setup(opts: { maxEntries?: number; maxAgeMs?: number } = {}) {
  let now = 1_000;
  const cache = new InvalidatedCache<string>({ maxEntries: opts.maxEntries ?? 100, maxAgeMs: opts.maxAgeMs ?? 60_000, now: () => now });
  let loads = 0;
  const loader = (value: string | undefined) => async () => {
    loads++;
    return value;
  };
  return { cache, loader, loads: () => loads, advance: (ms: number) => (now += ms) };
}

/** A loader whose answer the test releases, to interleave an invalidation with a read in flight. */
function deferred(value: string) {
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const load = async () => {
    await gate;
    return value;
  };
  return { load, release };
}

describe("InvalidatedCache", () => {
  it("drops the entries whose value matches, and a read in flight across it is not kept", async () => {
    const t = setup();
    await t.cache.get("a", t.loader("u1"), true);
    await t.cache.get("b", t.loader("u2"), true);
    const slow = deferred("u1");
    const pending = t.cache.get("c", slow.load, true);
    t.cache.invalidateWhere((v) => v === "u1");
    slow.release();
    expect(await pending).toBe("u1");
    expect(t.cache.size).toBe(1);
    expect(await t.cache.get("b", t.loader("other"), true)).toBe("u2");
    expect(await t.cache.get("a", t.loader("u1-again"), true)).toBe("u1-again");
  });

  it("serves a loaded value from memory until it is invalidated", async () => {
    const t = setup();
    expect(await t.cache.get("k", t.loader("u1"), true)).toBe("u1");
    expect(await t.cache.get("k", t.loader("other"), true)).toBe("u1");
    expect(t.loads()).toBe(1);
    t.cache.invalidate("k");
    expect(await t.cache.get("k", t.loader("u2"), true)).toBe("u2");
    expect(t.loads()).toBe(2);
  });

  it("never keeps a miss, so a key created later is found at once", async () => {
    const t = setup();
    expect(await t.cache.get("k", t.loader(undefined), true)).toBeUndefined();
    expect(await t.cache.get("k", t.loader("u1"), true)).toBe("u1");
    expect(t.cache.size).toBe(1);
  });

  it("neither reads nor keeps entries while unusable (invalidation channel down)", async () => {
    const t = setup();
    await t.cache.get("k", t.loader("u1"), true);
    expect(await t.cache.get("k", t.loader("u2"), false)).toBe("u2");
    expect(await t.cache.get("j", t.loader("u3"), false)).toBe("u3");
    expect(t.cache.size).toBe(1);
  });

  it("drops a value whose read was in flight when an invalidation arrived", async () => {
    const t = setup();
    const stale = deferred("old-user");
    const pending = t.cache.get("k", stale.load, true);
    t.cache.invalidate("k"); // processed while the read's reply is on its way
    stale.release();
    expect(await pending).toBe("old-user"); // the request in flight gets the answer it read...
    expect(await t.cache.get("k", t.loader(undefined), true)).toBeUndefined(); // ...but it was not kept
  });

  it("drops in-flight reads on clear() too", async () => {
    const t = setup();
    const stale = deferred("u1");
    const pending = t.cache.get("k", stale.load, true);
    t.cache.clear();
    stale.release();
    await pending;
    expect(t.cache.size).toBe(0);
  });

  it("peeks (no loader, no promise) only at what get() would serve from memory", async () => {
    const t = setup({ maxAgeMs: 100 });
    expect(t.cache.peek("k", true)).toBeUndefined();
    await t.cache.get("k", t.loader("u1"), true);
    expect(t.cache.peek("k", true)).toBe("u1");
    expect(t.cache.peek("k", false), "unusable: the channel is down").toBeUndefined();
    t.advance(100);
    expect(t.cache.peek("k", true), "older than maxAgeMs").toBeUndefined();
    await t.cache.get("k", t.loader("u2"), true);
    t.cache.invalidate("k");
    expect(t.cache.peek("k", true)).toBeUndefined();
    expect(t.loads()).toBe(2);
  });

  it("reads again after maxAgeMs even without an invalidation", async () => {
    const t = setup({ maxAgeMs: 100 });
    await t.cache.get("k", t.loader("u1"), true);
    t.advance(99);
    expect(await t.cache.get("k", t.loader("u2"), true)).toBe("u1");
    t.advance(1);
    expect(await t.cache.get("k", t.loader("u2"), true)).toBe("u2");
  });

  it("keeps at most maxEntries, evicting the oldest inserted", async () => {
    const t = setup({ maxEntries: 2 });
    await t.cache.get("a", t.loader("1"), true);
    await t.cache.get("b", t.loader("2"), true);
    await t.cache.get("c", t.loader("3"), true);
    expect(t.cache.size).toBe(2);
    expect(await t.cache.get("a", t.loader("1'"), true)).toBe("1'");
    expect(await t.cache.get("c", t.loader("3'"), true)).toBe("3");
  });
});
