import { describe, expect, it } from "vitest";
import { createKeys } from "../../src/store/keys.js";
import { MAX_SHARDS, shardOf, shardTags, slotOf } from "../../src/store/shard-layout.js";

describe("shard layout", () => {
  it("gives shard i a tag in the i-th part of the slot space", () => {
    for (const shards of [1, 3, 16, 64]) {
      const tags = shardTags("trib", shards);
      expect(tags).toHaveLength(shards);
      tags.forEach((tag, i) => {
        const slot = slotOf(`x{${tag}}y`);
        expect(slot).toBeGreaterThanOrEqual(Math.floor((i * 16384) / shards));
        expect(slot).toBeLessThan(Math.floor(((i + 1) * 16384) / shards));
      });
    }
  });

  it("is deterministic and refuses shard counts out of range", () => {
    expect(shardTags("p", 16)).toEqual(shardTags("p", 16));
    expect(() => shardTags("p", 0)).toThrow();
    expect(() => shardTags("p", MAX_SHARDS + 1)).toThrow();
  });

  it("spreads random user ids over every shard", () => {
    const counts = new Array<number>(16).fill(0);
    for (let i = 0; i < 16_000; i++) counts[shardOf(`u_${i.toString(36)}x${(i * 7919).toString(36)}`, 16)]! += 1;
    for (const c of counts) expect(c).toBeGreaterThan(700);
  });

  it("keeps every key of a user and the user's shard outbox in one slot", () => {
    const keys = createKeys("trib", 16);
    for (const id of ["u_a", "u_b", "u_0123456789abcdef"]) {
      const slot = slotOf(keys.user(id));
      for (const k of [keys.outboxOf(id), keys.events(id, "dc_x", "c"), keys.webhook(id, "wh_1"), keys.delivery(id, "d_1")]) {
        expect(slotOf(k)).toBe(slot);
      }
      expect(keys.outboxOf(id)).toBe(keys.shardOutbox(keys.shardOf(id)));
      expect(keys.user(id).startsWith(`${keys.userKeyBase(id)}:`)).toBe(true);
    }
  });

  it("gives the same keys for a user however many other users came in between (the per-user cache starts over)", () => {
    const keys = createKeys("trib", 16);
    const fresh = createKeys("trib", 16);
    const first = [keys.user("u_first"), keys.outboxOf("u_first"), keys.shardOf("u_first"), keys.ingressRate("u_first")];
    expect(first[3]).toBe(`${keys.userKeyBase("u_first")}:ingress-rate`);
    // More users than the cache keeps (10,000): it starts over at least once.
    for (let i = 0; i < 25_000; i++) {
      const id = `u_${i.toString(36)}`;
      expect(keys.userKeyBase(id)).toBe(`trib:{${keys.shardTags[shardOf(id, 16)]}}:${id}`);
    }
    expect([keys.user("u_first"), keys.outboxOf("u_first"), keys.shardOf("u_first"), keys.ingressRate("u_first")]).toEqual(first);
    expect(first).toEqual([fresh.user("u_first"), fresh.outboxOf("u_first"), fresh.shardOf("u_first"), fresh.ingressRate("u_first")]);
  });
});
