import type { Redis } from "ioredis";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { applyDedupe } from "../../../src/domain/dedupe.js";
import { DedupeStateStore } from "../../../src/store/dedupe-state.js";
import { createKeys, type Keys } from "../../../src/store/keys.js";
import { connectRedis, dropPrefix, testPrefix } from "../../helpers/redis.js";

/**
 * A source's dedupe state against real Redis: runs of one source that finish at the same time
 * must each see the ids the others kept (the conformance suite's "dedupe unique drops repeated
 * ids" sends two requests whose runs overlap).
 */

let prefix: string;
let keys: Keys;
let redis: Redis;

beforeEach(() => {
  prefix = testPrefix();
  keys = createKeys(prefix);
  redis = connectRedis();
});

afterEach(async () => {
  await dropPrefix(redis, prefix);
  redis.disconnect();
});

const emit = (id: string) => ({ meta: { id } });

describe("DedupeStateStore", () => {
  it("keeps a shared id once however many runs apply at the same time, and every run's own ids", async () => {
    const store = new DedupeStateStore(redis, keys);
    const runs = Array.from({ length: 20 }, (_, i) =>
      store.update("u_dedupe", "dc_dedupe", (state) => {
        const deduped = applyDedupe("unique", [emit("shared"), emit(`own${i}`)], state);
        return { state: deduped.state, result: deduped.kept.map((e) => e.meta.id) };
      }),
    );
    const kept = (await Promise.all(runs)).flat();
    expect(kept.filter((id) => id === "shared")).toHaveLength(1);
    expect(kept.filter((id) => id.startsWith("own")).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `own${i}`).sort());
    const stored = JSON.parse((await redis.get(keys.sourceDedupe("u_dedupe", "dc_dedupe"))) as string);
    expect([...stored.unique].sort()).toEqual([...kept].sort());
  });

  it("gives up, naming the source, when the state changes under every round", async () => {
    const store = new DedupeStateStore(redis, keys);
    let n = 0;
    const key = keys.sourceDedupe("u_dedupe", "dc_busy");
    await expect(
      store.update("u_dedupe", "dc_busy", (state) => {
        // Another writer changes the state between this round's read and its write.
        void redis.set(key, JSON.stringify({ unique: [`other${n++}`] }));
        return { state: { ...state, unique: ["mine"] }, result: null };
      }),
    ).rejects.toThrow(/dc_busy/);
  });
});
