import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { uniqueListeners } from "../../../src/events/fanout-plan.js";
import { installPipeline, newUserId, w } from "../../helpers/pipeline.js";

/**
 * Subscription matching (store/subscriptions.ts) agrees with a plain reference model, per user,
 * through creates and deletes.
 */

installPipeline();

interface SubTriple {
  emitter: string;
  listener: string;
  channel: string;
}

/**
 * The reference model of SPEC §2 subscription matching: a subscription matches an event when its
 * emitter is the event's emitter or the glob of its kind (dc_*, p_*), and its channel equals the
 * event's channel, "" and "default" being the same. The result is a set of listeners: an exact
 * and a glob subscription to the same listener make one delivery. Subscriptions of one user never
 * see another user's events (the model keeps one list per user).
 */
function referenceListeners(subs: readonly SubTriple[], event: { emitter: string; channel: string }): Set<string> {
  const channel = (c: string) => (c === "default" ? "" : c);
  const emitterMatches = (pattern: string) =>
    pattern === event.emitter ||
    (pattern === "dc_*" && event.emitter.startsWith("dc_")) ||
    (pattern === "p_*" && event.emitter.startsWith("p_"));
  return new Set(subs.filter((s) => emitterMatches(s.emitter) && channel(s.channel) === channel(event.channel)).map((s) => s.listener));
}

const EMITTERS = ["dc_aaaaaaaaaaaa", "dc_bbbbbbbbbbbb", "p_alpha", "p_beta"];
const LISTENERS = ["wh_111111111111", "wh_222222222222", "p_listener", "dc_listener00001"];
const channelArb = fc.oneof(
  fc.constantFrom("", "default", "Default", "$errors", "$logs", "orders", "a:b", "%3A"),
  fc.string({ minLength: 1, maxLength: 12 }),
);

describe("subscription matching (property)", () => {
  it("finds exactly the listeners the reference model finds, per user, with creates and deletes", async () => {
    const opArb = fc.record({
      kind: fc.constantFrom("create", "create", "create", "delete"),
      user: fc.constantFrom(0, 1),
      emitter: fc.constantFrom(...EMITTERS, "dc_*", "p_*"),
      listener: fc.constantFrom(...LISTENERS),
      channel: channelArb,
    });
    const eventArb = fc.record({
      user: fc.constantFrom(0, 1),
      emitter: fc.constantFrom(...EMITTERS, "p_nosubs", "dc_nosubs000000"),
      channel: channelArb,
    });
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 25 }), fc.array(eventArb, { minLength: 1, maxLength: 12 }), async (ops, events) => {
        const users = [newUserId(), newUserId()] as const;
        const model: Map<string, SubTriple>[] = [new Map(), new Map()];
        const tripleKey = (s: SubTriple) => `${s.emitter}\n${s.listener}\n${s.channel === "default" ? "" : s.channel}`;
        for (const op of ops) {
          const triple = { emitter: op.emitter, listener: op.listener, channel: op.channel };
          const userModel = model[op.user]!;
          if (op.kind === "create") {
            const rec = await w.subscriptions.create(users[op.user], op.emitter, op.listener, op.channel);
            expect(rec).toMatchObject({ emitter_id: op.emitter, listener_id: op.listener });
            if (!userModel.has(tripleKey(triple))) userModel.set(tripleKey(triple), triple);
          } else {
            const existed = await w.subscriptions.deleteTriple(users[op.user], op.emitter, op.listener, op.channel);
            expect(existed).toBe(userModel.has(tripleKey(triple)));
            userModel.delete(tripleKey(triple));
          }
        }
        for (const ev of events) {
          const expected = [...referenceListeners([...model[ev.user]!.values()], ev)].sort();
          // Fan-out passes the stored (normalised) channel; the raw name must give the same answer.
          for (const channel of [ev.channel, ev.channel === "default" ? "" : ev.channel]) {
            const listeners = uniqueListeners(await w.subscriptions.matching(users[ev.user], ev.emitter, channel));
            expect(listeners.length).toBe(new Set(listeners).size);
            expect([...listeners].sort()).toEqual(expected);
          }
        }
      }),
      { numRuns: 150 },
    );
  });
});
