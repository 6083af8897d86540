import { describe, expect, it } from "vitest";
import { createLogger } from "../../../src/observability/logger.js";
import { CircuitHints } from "../../../src/store/circuit-hints.js";
import { createKeys } from "../../../src/store/keys.js";
import { sharedKeySpace } from "../../helpers/redis.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * store/circuit-hints.ts against real Redis pub/sub: hints hold only while the subscription is
 * live, a published first failure drops one, and a reply that raced a message sets none.
 */

const space = sharedKeySpace();
const keys = createKeys(space.prefix);
const logger = createLogger("silent");

function hints(): CircuitHints {
  return new CircuitHints({ subscriber: space.connect(), channel: keys.circuitChanges(), logger });
}

describe("circuit hints (store/circuit-hints.ts)", () => {
  it("keeps nothing until subscribed, nor after stopping", async () => {
    const h = hints();
    h.markClean("u_1", "wh_1", h.version());
    expect(h.isClean("u_1", "wh_1")).toBe(false);
    await h.start();
    h.markClean("u_1", "wh_1", h.version());
    expect(h.isClean("u_1", "wh_1")).toBe(true);
    expect(h.isClean("u_1", "wh_2")).toBe(false);
    await h.stop();
    expect(h.isClean("u_1", "wh_1")).toBe(false);
  });

  it("drops a webhook's hint when its change is published, in every process", async () => {
    const [a, b] = [hints(), hints()];
    await Promise.all([a.start(), b.start()]);
    for (const h of [a, b]) {
      h.markClean("u_2", "wh_x", h.version());
      h.markClean("u_2", "wh_y", h.version());
    }
    await space.redis().publish(keys.circuitChanges(), "u_2 wh_x");
    await waitFor(() => !a.isClean("u_2", "wh_x") && !b.isClean("u_2", "wh_x"), { what: "both hints of wh_x dropped" });
    expect(a.isClean("u_2", "wh_y") && b.isClean("u_2", "wh_y")).toBe(true);
    await Promise.all([a.stop(), b.stop()]);
  });

  it("sets no hint from a reply when a change arrived after its command was sent", async () => {
    const h = hints();
    await h.start();
    const version = h.version();
    await space.redis().publish(keys.circuitChanges(), "u_3 wh_z");
    await waitFor(() => h.version() !== version, { what: "the message" });
    h.markClean("u_3", "wh_z", version);
    expect(h.isClean("u_3", "wh_z")).toBe(false);
    h.markClean("u_3", "wh_z", h.version());
    expect(h.isClean("u_3", "wh_z")).toBe(true);
    await h.stop();
  });
});
