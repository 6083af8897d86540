/**
 * How long subscription filters hold the event loop per event (docs/decisions.md "Filter budget"),
 * with the pure evaluator alone (no daemon, no Redis): `npx tsx bench/filter-cost.ts`.
 *
 * 1. The costly case: ten filters, each an `$or` of 63 `$contains` that never match, on an event
 *    carrying a 200,000-element array (400 KB of JSON, within the body limit). Unbounded (what
 *    fan-out did before the budget) against the default per-event budget, per event, and what one
 *    user's second's worth of budget costs.
 * 2. The price of a visit for each kind of work the budget counts (array elements, object members
 *    compared, string characters searched), so its default can be read as time.
 * 3. An ordinary filter on a small event, with and without the meter: the budget's overhead.
 *
 * Each figure is the median of several rounds after a warm-up round (which is also printed: a cold
 * process is the worse case).
 */
import { FILTER_BUDGET_DEFAULTS } from "../src/domain/filter-budget.js";
import { compileFilter, evaluateFilter, type FilterPredicate, parseSubscriptionFilter } from "../src/domain/subscription-filter.js";
import { median } from "./stats.js";

const ROUNDS = 7;

function rounds(what: string, once: () => void): number {
  const times: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const start = performance.now();
    once();
    times.push(performance.now() - start);
  }
  const mid = median(times);
  console.log(`${what}: first ${times[0]?.toFixed(1)} ms, median ${mid.toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms`);
  return mid;
}

const compiled = (filter: unknown): FilterPredicate => compileFilter(parseSubscriptionFilter(filter) as Record<string, unknown>);

// 1. The costly case.
const filters = Array.from({ length: 10 }, (_, f) =>
  compiled({ $or: Array.from({ length: 63 }, (_, i) => ({ items: { $contains: `absent-${f}-${i}` } })) }),
);
const text = JSON.stringify({ items: new Array(200_000).fill(0) });
const payload: unknown = JSON.parse(text);
console.log(`payload ${text.length} bytes of JSON; ten filters of 64 conditions`);
rounds("JSON.parse of the payload (not metered)", () => JSON.parse(text));
const perEvent = (visits: number) => () => {
  const meter = { left: visits };
  for (const f of filters) evaluateFilter(f, payload, meter);
};
rounds("ten filters, unbounded", perEvent(Number.POSITIVE_INFINITY));
rounds(`ten filters, FILTER_VISITS_PER_EVENT=${FILTER_BUDGET_DEFAULTS.perEvent}`, perEvent(FILTER_BUDGET_DEFAULTS.perEvent));
rounds(`one user's second: ${FILTER_BUDGET_DEFAULTS.perSecondPerUser} visits`, () => {
  for (let spent = 0; spent < FILTER_BUDGET_DEFAULTS.perSecondPerUser; spent += FILTER_BUDGET_DEFAULTS.perEvent)
    perEvent(FILTER_BUDGET_DEFAULTS.perEvent)();
});

// 2. The price of a visit, by kind (each run spends exactly `VISITS` and stops).
const VISITS = 1_000_000;
const kinds: [string, FilterPredicate, unknown][] = [
  ["array elements (scalar $contains)", compiled({ items: { $contains: "x" } }), { items: new Array(VISITS * 2).fill(0) }],
  [
    "array members compared ($contains of an object, members without its key)",
    compiled({ items: { $contains: { a: 1 } } }),
    { items: Array.from({ length: VISITS }, () => ({ b: 2 })) },
  ],
  [
    "array members compared ($contains of an object, members with its key and one more)",
    compiled({ items: { $contains: { a: 1 } } }),
    { items: Array.from({ length: VISITS }, () => ({ a: 1, b: 2 })) },
  ],
  ["string characters (worst-case substring search)", compiled({ s: { $contains: `${"a".repeat(99)}b` } }), { s: "a".repeat(VISITS - 1) }],
];
for (const [kind, f, p] of kinds) {
  const ms = rounds(`${VISITS} visits of ${kind}`, () => evaluateFilter(f, p, { left: VISITS }));
  console.log(`  ${((ms * 1e6) / VISITS).toFixed(1)} ns per visit`);
}

// 3. An ordinary filter: its cost with the meter, and without any (a meter that never runs out).
const ordinary = compiled({ order: { $gte: 40 }, $or: [{ tags: { $contains: "vip" } }, { country: { $in: ["DE", "FR"] } }] });
const small = { order: 42, tags: ["a", "b", "vip"], country: "DE" };
const N = 2_000_000;
for (const [what, visits] of [
  ["unbounded meter", Number.POSITIVE_INFINITY],
  ["default per-event budget", FILTER_BUDGET_DEFAULTS.perEvent],
] as const) {
  const ms = rounds(`ordinary filter × ${N}, ${what}`, () => {
    for (let i = 0; i < N; i++) evaluateFilter(ordinary, small, { left: visits });
  });
  console.log(`  ${((ms * 1e6) / N).toFixed(0)} ns per event`);
}
