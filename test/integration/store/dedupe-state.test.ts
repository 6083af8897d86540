import { describe, expect, it } from "vitest";
import { applyDedupe } from "../../../src/domain/dedupe.js";
import { DedupeStateStore } from "../../../src/store/dedupe-state.js";
import { keySpacePerTest } from "../../helpers/redis.js";

/**
 * A source's dedupe state against real Redis: runs of one source that finish at the same time
 * must each see the ids the others kept (the conformance suite's "dedupe unique drops repeated
 * ids" sends two requests whose runs overlap).
 */

const space = keySpacePerTest();

const emit = (id: string) => ({ meta: { id } });

describe("DedupeStateStore", () => {
  it("keeps a shared id once however many runs apply at the same time, and every run's own ids", async () => {
    const store = new DedupeStateStore(space.redis, space.keys);
    const runs = Array.from({ length: 20 }, (_, i) =>
      store.update("u_dedupe", "dc_dedupe", (state) => {
        const deduped = applyDedupe("unique", [emit("shared"), emit(`own${i}`)], state);
        return { state: deduped.state, result: deduped.kept.map((e) => e.meta.id) };
      }),
    );
    const kept = (await Promise.all(runs)).flat();
    expect(kept.filter((id) => id === "shared")).toHaveLength(1);
    expect(kept.filter((id) => id.startsWith("own")).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `own${i}`).sort());
    const stored = JSON.parse((await space.redis.get(space.keys.sourceDedupe("u_dedupe", "dc_dedupe"))) as string);
    expect([...stored.unique].sort()).toEqual([...kept].sort());
  });

  it("gives up, naming the source, when the state changes under every round", async () => {
    const store = new DedupeStateStore(space.redis, space.keys);
    let n = 0;
    const key = space.keys.sourceDedupe("u_dedupe", "dc_busy");
    await expect(
      store.update("u_dedupe", "dc_busy", (state) => {
        // Another writer changes the state between this round's read and its write.
        void space.redis.set(key, JSON.stringify({ unique: [`other${n++}`] }));
        return { state: { ...state, unique: ["mine"] }, result: null };
      }),
    ).rejects.toThrow(/dc_busy/);
  });
});
