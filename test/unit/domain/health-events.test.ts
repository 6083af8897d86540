import { describe, expect, it } from "vitest";
import { HEALTH_CHANNELS, isHealthEvent, reportsDeliveryFailure } from "../../../src/domain/health-events.js";
import { emitterGlob } from "../../../src/domain/ids.js";
import { parseOutboxEntry } from "../../../src/events/outbox.js";

/** The health-event rules (SPEC §12) without I/O: channel names, what counts as one, the no-loop rule. */

describe("health events", () => {
  it("uses the three channels SPEC §12 names", () => {
    expect(Object.values(HEALTH_CHANNELS).sort()).toEqual(["$delivery_failed", "$webhook_disabled", "$webhook_recovered"]);
  });

  it("knows a health event by its webhook emitter", () => {
    expect(isHealthEvent("wh_abc123")).toBe(true);
    for (const id of ["p_orders", "dc_abc123", "p_wh_x"]) expect(isHealthEvent(id), id).toBe(false);
  });

  it("reports a failed webhook delivery, except the delivery of a health event (no loops) and workflow deliveries", () => {
    expect(reportsDeliveryFailure("webhook", "p_orders")).toBe(true);
    expect(reportsDeliveryFailure("webhook", "dc_abc123")).toBe(true);
    expect(reportsDeliveryFailure("webhook", "wh_abc123")).toBe(false);
    expect(reportsDeliveryFailure("workflow", "p_orders")).toBe(false);
  });

  it("puts every webhook under the glob wh_*, beside dc_* and p_*", () => {
    expect(emitterGlob("wh_abc123")).toBe("wh_*");
    expect(emitterGlob("dc_abc123")).toBe("dc_*");
    expect(emitterGlob("p_orders")).toBe("p_*");
    expect(emitterGlob("sc_abc123")).toBeUndefined();
  });

  it("reads the webhook emitter kind back from the outbox", () => {
    const fields = ["u", "u_1", "e", "wh_1", "c", "$delivery_failed", "i", "100-1", "k", "webhook", "p", "{}"];
    expect(parseOutboxEntry("9-1", fields)).toMatchObject({ emitterId: "wh_1", emitterKind: "webhook", channel: "$delivery_failed" });
  });
});
