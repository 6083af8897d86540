import { type DeliveryOrigin, JOB_STARTS } from "../domain/delivery-plan.js";
import { deliveryIdFor, type ListenerKind, listenerKindOf, sourceRunIdFor } from "../domain/ids.js";
import { type FilterAllowance, type FilterBudgetLimit, FilterBudgets } from "../domain/filter-budget.js";
import {
  evaluateFilter,
  type FilterPredicate,
  type FilterPredicates,
  type SubscriptionFilter,
  TOO_COSTLY,
  type VisitMeter,
} from "../domain/subscription-filter.js";
import { newDeliveryJob } from "../delivery/jobs.js";
import type { DeliveryJob, SourceRunJob } from "../queue/catalog.js";
import type { OutboxEntry } from "./outbox.js";

/**
 * What fan-out makes of a batch of outbox entries, decided without I/O: one delivery per webhook
 * or workflow listener and one source run per source listener, with deterministic ids, so a batch
 * fanned out twice yields the same jobs. FanoutWorker (fanout.ts) looks the listeners up and
 * dispatches the plan.
 */

/** One (user, emitter, channel) whose subscriptions the batch needs. */
export interface Lookup {
  readonly userId: string;
  readonly emitterId: string;
  readonly channel: string;
}

/**
 * The distinct lookups of a batch (entries of one emitter and channel share theirs), and for each
 * entry the index of its lookup.
 */
export function planLookups(entries: readonly OutboxEntry[]): { lookups: Lookup[]; lookupOf: number[] } {
  const index = new Map<string, number>();
  const lookups: Lookup[] = [];
  const lookupOf: number[] = [];
  for (const e of entries) {
    const key = `${e.userId}\n${e.emitterId}\n${e.channel}`;
    let at = index.get(key);
    if (at === undefined) {
      at = lookups.push({ userId: e.userId, emitterId: e.emitterId, channel: e.channel }) - 1;
      index.set(key, at);
    }
    lookupOf.push(at);
  }
  return { lookups, lookupOf };
}

/** One delivery per listener and event, even when an exact and a glob subscription both match. */
export function uniqueListeners(subs: readonly { readonly listener_id: string }[]): string[] {
  return [...new Set(subs.map((s) => s.listener_id))];
}

/** A listener an event's lookup matched, and the test its payload must pass (null: every event). */
export interface MatchedListener {
  readonly listenerId: string;
  readonly accepts: FilterPredicate | null;
}

/**
 * `uniqueListeners` with the subscriptions' filters (SPEC §12), compiled through `predicates` (a
 * cache: fan-out compiles each distinct filter once). A listener that several subscriptions match
 * (an exact and a glob one) takes the event when any of them does: unfiltered if one is.
 */
export function matchedListeners(
  subs: readonly { readonly listener_id: string; readonly filter: SubscriptionFilter | null }[],
  predicates: FilterPredicates,
): MatchedListener[] {
  const tests = new Map<string, FilterPredicate[] | null>();
  for (const s of subs) {
    const known = tests.get(s.listener_id);
    if (known === null) continue;
    if (s.filter === null) tests.set(s.listener_id, null);
    else if (known) known.push(predicates.predicateFor(s.filter));
    else tests.set(s.listener_id, [predicates.predicateFor(s.filter)]);
  }
  return [...tests].map(([listenerId, list]) => ({
    listenerId,
    accepts:
      list === null ? null : list.length === 1 ? (list[0] as FilterPredicate) : (p: unknown, m: VisitMeter) => list.some((f) => f(p, m)),
  }));
}

/** What a payload that is not JSON (none should be: it was parsed on the way in) reads as: matching no path. */
const UNREADABLE = undefined;

function parsePayload(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return UNREADABLE;
  }
}

export interface FanoutPlan {
  /** Webhook and workflow deliveries, in entry order. */
  readonly deliveries: DeliveryJob[];
  /** The outbox entry of each delivery (same index). */
  readonly entryOf: string[];
  readonly sourceRuns: { readonly id: string; readonly data: SourceRunJob }[];
  /** Deliveries and source runs per listener kind (tributary_fanout_deliveries_total). */
  readonly counts: Record<ListenerKind, number>;
  /** Deliveries and source runs left out by a filter, per listener kind (tributary_deliveries_total{outcome="filtered"}). */
  readonly filtered: Record<ListenerKind, number>;
  /** The same, per listener: one for each (event, listener) a filter left out, in entry order. */
  readonly filteredFor: { readonly userId: string; readonly listenerId: string; readonly eventId: string }[];
  /**
   * Deliveries and source runs left out because their filters needed more visits than the event's
   * allowance (tributary_deliveries_total{outcome="filter_budget"}): fail closed, as for a filter
   * that cannot be read.
   */
  readonly overBudget: Record<ListenerKind, number>;
  /** The events whose filters ran out, each once, with the listeners they were kept from. */
  readonly overBudgetEvents: OverBudgetEvent[];
}

export interface OverBudgetEvent {
  readonly entry: OutboxEntry;
  readonly listenerIds: string[];
  /** Which bound stopped them: the event's own (FILTER_VISITS_PER_EVENT), or its user's (FILTER_VISITS_PER_SECOND_PER_USER). */
  readonly limit: FilterBudgetLimit;
}

/** What the filters of a batch may spend, and when (the time refills users' allowances). */
export interface FilterSpending {
  readonly budgets: FilterBudgets;
  readonly nowMs: number;
}

/** No bound: for callers that plan without a budget (tests of the plan itself). */
const UNBOUNDED: FilterSpending = {
  budgets: new FilterBudgets({ perEvent: Number.POSITIVE_INFINITY, perSecondPerUser: 0 }),
  nowMs: 0,
};

/** `redo` for entries taken over from another consumer (or read again): their deliveries may be done already. */
export type FanoutOrigin = Extract<DeliveryOrigin, "fanout" | "redo">;

/**
 * The plan for `entries`, given the listeners each one matched (`matches[i]` for `entries[i]`,
 * each listener once: matchedListeners). A listener whose filter refuses the event gets nothing;
 * an event's payload is parsed once, and only when one of its listeners has a filter and the
 * event's allowance (`spending`) is not empty. The filters of an event share its allowance, in
 * listener order; what they spent is charged to the emitting user.
 */
export function planFanout(
  entries: readonly OutboxEntry[],
  matches: readonly (readonly MatchedListener[])[],
  origin: FanoutOrigin,
  spending: FilterSpending = UNBOUNDED,
): FanoutPlan {
  const { budgets, nowMs } = spending;
  const start = origin === "redo" ? JOB_STARTS.redo : JOB_STARTS.fanout;
  const deliveries: DeliveryJob[] = [];
  const entryOf: string[] = [];
  const sourceRuns: { id: string; data: SourceRunJob }[] = [];
  const counts = { webhook: 0, workflow: 0, source: 0 };
  const filtered = { webhook: 0, workflow: 0, source: 0 };
  const filteredFor: { userId: string; listenerId: string; eventId: string }[] = [];
  const overBudget = { webhook: 0, workflow: 0, source: 0 };
  const overBudgetEvents: OverBudgetEvent[] = [];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as OutboxEntry;
    let payload: unknown;
    let allowance: FilterAllowance | undefined;
    const meter: VisitMeter = { left: 0 };
    let stopped: string[] | undefined;
    for (const { listenerId, accepts } of matches[i] ?? []) {
      const kind = listenerKindOf(listenerId);
      if (accepts && kind) {
        if (!allowance) {
          allowance = budgets.allowance(e.userId, nowMs);
          meter.left = allowance.visits;
          // Nothing to spend: not even the parse is done (every filter of the event answers TOO_COSTLY).
          payload = allowance.visits > 0 ? parsePayload(e.payload) : UNREADABLE;
        }
        const answer = evaluateFilter(accepts, payload, meter);
        if (answer === TOO_COSTLY) {
          overBudget[kind]++;
          if (stopped) stopped.push(listenerId);
          else stopped = [listenerId];
          continue;
        }
        if (!answer) {
          filtered[kind]++;
          filteredFor.push({ userId: e.userId, listenerId, eventId: e.eventId });
          continue;
        }
      }
      if (kind === "webhook" || kind === "workflow") {
        counts[kind]++;
        deliveries.push(newDeliveryJob(e, listenerId, kind, deliveryIdFor(e, listenerId), start));
        entryOf.push(e.entryId);
      } else if (kind === "source") {
        counts.source++;
        sourceRuns.push({
          id: sourceRunIdFor(e, listenerId),
          data: {
            kind: "event",
            userId: e.userId,
            sourceId: listenerId,
            emitterId: e.emitterId,
            channel: e.channel,
            eventId: e.eventId,
            payload: e.payload,
            // A webhook's health event counts as a hop too: a source that answers failures with emits
            // delivered to the failing webhook would otherwise cycle forever (domain/health-events.ts).
            hops: e.emitterKind === "workflow" ? 0 : e.hops + 1,
            acceptedAtMs: e.acceptedAtMs,
          },
        });
      }
    }
    if (allowance) {
      budgets.spend(e.userId, allowance.visits - meter.left, nowMs);
      if (stopped) overBudgetEvents.push({ entry: e, listenerIds: stopped, limit: allowance.limit });
    }
  }
  return { deliveries, entryOf, sourceRuns, counts, filtered, filteredFor, overBudget, overBudgetEvents };
}
