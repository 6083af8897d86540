import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { WorkflowStore } from "../../../src/store/workflows.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * Workflow updates (PUT /v1/workflows/{id}) against a real Redis, from several "processes" (each
 * its own connection and store) at once: each update keeps its own fields; none writes back a
 * record it read before another's write.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);

function store(): WorkflowStore {
  return new WorkflowStore({ redis: space.connect(), keys, now: Date.now, randomBytes });
}

describe("workflow updates", () => {
  it("keeps every field of concurrent updates that set different fields", async () => {
    const stores = [store(), store(), store(), store()];
    const userId = `u_${randomBytes(6).toString("hex")}`;
    for (let round = 0; round < 20; round++) {
      const id = `p_race${round}`;
      await Promise.all([
        stores[0]?.upsert(userId, id, { name: `name ${round}` }),
        stores[1]?.upsert(userId, id, { trigger_url: `https://example.com/${round}` }),
        stores[2]?.upsert(userId, id, { name: `name ${round}` }),
        stores[3]?.upsert(userId, id, { trigger_url: `https://example.com/${round}` }),
      ]);
      const w = await stores[0]?.get(userId, id);
      expect(w, `round ${round}`).toMatchObject({ id, name: `name ${round}`, trigger_url: `https://example.com/${round}` });
    }
    const listed = await stores[0]?.list(userId, { limit: 100 });
    expect(listed?.data.map((w) => w.id).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `p_race${i}`).sort());
  });
});
