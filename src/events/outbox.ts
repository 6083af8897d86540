import type { EmitterKind } from "../store/events.js";

/**
 * The outbox wire format: what the record script (`store/scripts/record-events.ts`) writes to the outbox stream for
 * each event a listener may want, and what fan-out reads back. Both sides are described here; the
 * writer is Lua (it must be part of the record's atomic step), so the field names below are
 * repeated in RECORD_EVENTS's `XADD`, and test/unit/outbox.test.ts fails when the two drift.
 *
 * One stream entry per event, as field/value pairs:
 *
 * | field | value                                                             |
 * |-------|-------------------------------------------------------------------|
 * | `u`   | user id                                                           |
 * | `e`   | emitter id                                                        |
 * | `c`   | channel, normalised (`""` for the default channel)                |
 * | `i`   | event id (the summary stream's entry id)                          |
 * | `t`   | accepted-at, epoch ms (absent: 0)                                 |
 * | `h`   | source-to-source hops so far (absent: 0)                          |
 * | `k`   | emitter kind, `source`, `workflow` or `webhook` (absent: `workflow`) |
 * | `p`   | the payload, JSON text as emitted                                 |
 *
 * Entries written by older versions may lack `t`, `h` and `k`; the defaults keep them readable.
 */

/** The field names, in the order the record script writes them. */
export const OUTBOX_FIELDS = ["u", "e", "c", "i", "t", "h", "k", "p"] as const;

/** One outbox entry, parsed. */
export interface OutboxEntry {
  /** The stream entry id (what the consumer group acknowledges). */
  entryId: string;
  userId: string;
  emitterId: string;
  emitterKind: EmitterKind;
  channel: string;
  eventId: string;
  acceptedAtMs: number;
  hops: number;
  payload: string;
}

/**
 * Parses one entry's field/value pairs; undefined when a required field is missing (the caller
 * drops the entry: nothing could deliver it).
 */
export function parseOutboxEntry(entryId: string, fields: readonly string[]): OutboxEntry | undefined {
  let u: string | undefined;
  let e: string | undefined;
  let c: string | undefined;
  let i: string | undefined;
  let t: string | undefined;
  let h: string | undefined;
  let k: string | undefined;
  let p: string | undefined;
  // A switch over the pairs instead of a field map: this runs once per event fanned out.
  for (let at = 0; at + 1 < fields.length; at += 2) {
    const value = fields[at + 1];
    switch (fields[at]) {
      case "u":
        u = value;
        break;
      case "e":
        e = value;
        break;
      case "c":
        c = value;
        break;
      case "i":
        i = value;
        break;
      case "t":
        t = value;
        break;
      case "h":
        h = value;
        break;
      case "k":
        k = value;
        break;
      case "p":
        p = value;
        break;
    }
  }
  if (!u || !e || c === undefined || !i || p === undefined) return undefined;
  return {
    entryId,
    userId: u,
    emitterId: e,
    emitterKind: k === "source" || k === "webhook" ? k : "workflow",
    channel: c,
    eventId: i,
    acceptedAtMs: Number(t ?? 0),
    hops: Number(h ?? 0),
    payload: p,
  };
}
