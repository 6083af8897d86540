import type { FilterBudgetLimits } from "../domain/filter-budget.js";
import { newId, type RandomBytes } from "../domain/ids.js";
import type { Logger } from "../observability/logger.js";
import type { EmitterKind } from "../store/events.js";
import type { Keys } from "../store/keys.js";
import type { OverBudgetEvent } from "./fanout-plan.js";
import type { Ingest, RecordGuard } from "./ingest.js";

/** One record per emitter and this long at most, per process: a flood of costly events makes one. */
const REPORT_EVERY_MS = 60_000;
/** Emitters remembered for that; past it the oldest are forgotten (and may be reported again). */
const MAX_REMEMBERED = 10_000;
/** Listener ids named in one record; the rest are counted. */
const MAX_NAMED = 10;

export interface FilterBudgetReportsDeps {
  readonly ingest: Pick<Ingest, "recordFor">;
  readonly keys: Keys;
  readonly limits: FilterBudgetLimits;
  readonly logger: Logger;
  readonly randomBytes: RandomBytes;
  readonly now?: () => number;
}

/** Thrown inside a record whose emitter is gone; caught below. */
class EmitterGone extends Error {}

/**
 * Tells the emitting user that their filters ran out of budget (domain/filter-budget.ts), the way
 * the daemon reports a run it refused (MAX_HOPS, QUOTA_EXCEEDED): a record on the emitter's
 * `$errors` channel, `{error: {code: "FILTER_BUDGET_EXCEEDED", msg, stack, ts}, original_event:
 * null, original_context}`, which the user lists like any `$errors` event. The event's payload is
 * not copied (it may be the very thing too large to filter); `original_context.event_id` names it.
 * (Fan-out counts every such event in `tributary_filter_budget_exceeded_total{limit}`.)
 *
 * At most one record per emitter a minute and process, and none for an event that was itself on
 * `$errors` (its record would be filtered by the same budget, and so on). Never throws: a record
 * that cannot be written is logged, and fan-out goes on.
 */
export class FilterBudgetReports {
  private readonly now: () => number;
  /** When each emitter ("<user> <emitter>") was last reported, oldest first. */
  private readonly reported = new Map<string, number>();

  constructor(private readonly d: FilterBudgetReportsDeps) {
    this.now = d.now ?? Date.now;
  }

  async report(events: readonly OverBudgetEvent[]): Promise<void> {
    const due: OverBudgetEvent[] = [];
    const nowMs = this.now();
    for (const event of events) {
      const { userId, emitterId, channel } = event.entry;
      if (channel === "$errors") continue;
      const key = `${userId} ${emitterId}`;
      const last = this.reported.get(key);
      if (last !== undefined && nowMs - last < REPORT_EVERY_MS) continue;
      this.reported.delete(key);
      this.reported.set(key, nowMs);
      if (this.reported.size > MAX_REMEMBERED) this.reported.delete(this.reported.keys().next().value as string);
      due.push(event);
    }
    await Promise.all(due.map((event) => this.record(event, nowMs)));
  }

  private async record(event: OverBudgetEvent, nowMs: number): Promise<void> {
    const { entry, listenerIds, limit } = event;
    const ts = new Date(nowMs).toISOString();
    const payload = {
      error: { code: "FILTER_BUDGET_EXCEEDED", msg: this.message(event), stack: "", ts },
      original_event: null,
      original_context: {
        id: newId("emit_", this.d.randomBytes),
        ts,
        emitter_id: entry.emitterId,
        event_id: entry.eventId,
        event_name: entry.channel,
        listener_ids: listenerIds.slice(0, MAX_NAMED),
        limit,
      },
    };
    try {
      await this.d.ingest.recordFor(
        entry.userId,
        entry.emitterId,
        entry.emitterKind,
        [{ event: payload, name: "$errors", meta: { summary: `filters too costly for event ${entry.eventId}` } }],
        entry.hops,
        this.guard(entry.emitterKind),
      );
    } catch (err) {
      if (err instanceof EmitterGone) return;
      this.d.logger.warn(
        { err: err instanceof Error ? err.message : String(err), userId: entry.userId, emitterId: entry.emitterId },
        "fan-out: could not record a filter budget report on $errors",
      );
    }
  }

  private message({ entry, listenerIds, limit }: OverBudgetEvent): string {
    const { perEvent, perSecondPerUser } = this.d.limits;
    const named = listenerIds.slice(0, MAX_NAMED).join(", ");
    const more = listenerIds.length > MAX_NAMED ? ` and ${listenerIds.length - MAX_NAMED} more` : "";
    const bound =
      limit === "event"
        ? `the ${perEvent.toLocaleString("en-US")} visits the filters of one event may make`
        : `the ${perSecondPerUser.toLocaleString("en-US")} visits per second this user's events may make on filters`;
    return (
      `event ${entry.eventId} was not delivered to ${named}${more}: evaluating their subscription filters needed more than ${bound}. ` +
      "Further such events of this emitter within a minute are not reported again."
    );
  }

  /** The emitter's record must exist: a report never recreates the streams of a deleted emitter. */
  private guard(kind: EmitterKind): RecordGuard {
    const { keys } = this.d;
    const keyOf =
      kind === "source"
        ? (userId: string, id: string) => keys.source(userId, id)
        : kind === "workflow"
          ? (userId: string, id: string) => keys.workflow(userId, id)
          : (userId: string, id: string) => keys.webhook(userId, id);
    return { keyOf, ensure: () => Promise.reject(new EmitterGone()) };
  }
}
