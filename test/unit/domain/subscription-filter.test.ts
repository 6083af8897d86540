import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/domain/errors.js";
import {
  compileFilter,
  evaluateFilter,
  FILTER_LIMITS,
  type FilterAnswer,
  FilterPredicates,
  parseSubscriptionFilter,
  type SubscriptionFilter,
  TOO_COSTLY,
} from "../../../src/domain/subscription-filter.js";

const unmetered = () => ({ left: Number.POSITIVE_INFINITY });
const matches = (filter: SubscriptionFilter, payload: unknown): FilterAnswer => evaluateFilter(compileFilter(filter), payload, unmetered());

/** The 400 message parseSubscriptionFilter gives `raw`, or "" when it accepts it. */
function refusal(raw: unknown): string {
  try {
    parseSubscriptionFilter(raw);
    return "";
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return (err as Error).message;
  }
}

describe("parseSubscriptionFilter", () => {
  it("takes a JSON object, or its text from the query string", () => {
    expect(parseSubscriptionFilter({ "user.plan": "pro" })).toEqual({ "user.plan": "pro" });
    expect(parseSubscriptionFilter('{"n":{"$gt":1}}')).toEqual({ n: { $gt: 1 } });
  });

  it("tells absent (keep the filter) from cleared (null, empty text, {})", () => {
    expect(parseSubscriptionFilter(undefined)).toBeUndefined();
    expect(parseSubscriptionFilter(null)).toBeNull();
    expect(parseSubscriptionFilter("")).toBeNull();
    expect(parseSubscriptionFilter({})).toBeNull();
    expect(parseSubscriptionFilter("{}")).toBeNull();
  });

  it("refuses what is not a JSON object", () => {
    for (const raw of ["[1]", "not json", 5, true, [], "3"]) expect(refusal(raw)).toBe("filter must be a JSON object");
  });

  it("names the path and operator at fault", () => {
    expect(refusal({ "user.name": { $regex: "x" } })).toBe("filter: unknown operator $regex at user.name");
    expect(refusal({ $nor: [] })).toMatch(/^filter: unknown operator \$nor /);
    expect(refusal({ n: { $gt: true } })).toBe("filter: $gt at n needs a number or a string");
    expect(refusal({ n: { $gt: null } })).toBe("filter: $gt at n needs a number or a string");
    expect(refusal({ tags: { $in: "a" } })).toBe("filter: $in at tags needs an array");
    expect(refusal({ tags: { $nin: {} } })).toBe("filter: $nin at tags needs an array");
    expect(refusal({ a: { $exists: 1 } })).toBe("filter: $exists at a needs true or false");
    expect(refusal({ a: { $startsWith: 1 } })).toBe("filter: $startsWith at a needs a string");
    expect(refusal({ a: { $gt: 1, b: 2 } })).toBe('filter: at a: an operator object cannot also have the field "b"');
    expect(refusal({ $and: [] })).toBe("filter: $and must be a non-empty array of filter objects");
    expect(refusal({ $or: {} })).toBe("filter: $or must be a non-empty array of filter objects");
    expect(refusal({ $or: [{ a: 1 }, 2] })).toBe("filter: $or[1] must be a filter object");
    expect(refusal({ $not: [] })).toBe("filter: $not must be a filter object");
    expect(refusal({ $or: [{ a: { $bad: 1 } }] })).toBe("filter: unknown operator $bad at a");
    expect(refusal({ "a..b": 1 })).toBe('filter: path "a..b" has an empty segment');
    expect(refusal({ "": 1 })).toBe('filter: path "" has an empty segment');
  });

  it("bounds size, depth, conditions and path length", () => {
    expect(refusal({ a: "x".repeat(FILTER_LIMITS.maxChars) })).toBe(`filter: must be at most ${FILTER_LIMITS.maxChars} characters of JSON`);
    expect(refusal(JSON.stringify({ a: "x".repeat(FILTER_LIMITS.maxChars) }))).toMatch(/at most 4096 characters/);
    let deep: SubscriptionFilter = { a: 1 };
    for (let i = 0; i < FILTER_LIMITS.maxDepth; i++) deep = { $not: deep };
    expect(refusal(deep)).toBe(`filter: nests deeper than ${FILTER_LIMITS.maxDepth} levels`);
    const many = Object.fromEntries(Array.from({ length: FILTER_LIMITS.maxConditions + 1 }, (_, i) => [`k${i}`, i]));
    expect(refusal(many)).toBe(`filter: has more than ${FILTER_LIMITS.maxConditions} conditions`);
    const enough = Object.fromEntries(Array.from({ length: FILTER_LIMITS.maxConditions }, (_, i) => [`k${i}`, i]));
    expect(refusal(enough)).toBe("");
    const long = Array.from({ length: FILTER_LIMITS.maxPathSegments + 1 }, () => "a").join(".");
    expect(refusal({ [long]: 1 })).toBe(`filter: path "${long}" has more than ${FILTER_LIMITS.maxPathSegments} segments`);
  });
});

describe("compileFilter", () => {
  const order = {
    id: "o_1",
    total: 120,
    currency: "EUR",
    tags: ["vip", "eu"],
    user: { plan: "pro", email: "a@example.com" },
    items: [{ sku: "A" }],
  };

  it("compares literals for deep equality, every key of the filter holding", () => {
    expect(matches({ currency: "EUR", "user.plan": "pro" }, order)).toBe(true);
    expect(matches({ currency: "EUR", "user.plan": "free" }, order)).toBe(false);
    expect(matches({ tags: ["vip", "eu"] }, order)).toBe(true);
    expect(matches({ tags: ["eu", "vip"] }, order)).toBe(false);
    expect(matches({ user: { email: "a@example.com", plan: "pro" } }, order)).toBe(true);
    expect(matches({ user: { plan: "pro" } }, order)).toBe(false);
  });

  it("indexes arrays with numeric segments", () => {
    expect(matches({ "tags.0": "vip", "items.0.sku": "A" }, order)).toBe(true);
    expect(matches({ "tags.2": { $exists: true } }, order)).toBe(false);
    expect(matches({ "tags.01": "eu" }, order)).toBe(false);
    expect(matches({ "tags.length": 2 }, order)).toBe(false);
  });

  it("compares only numbers with numbers and strings with strings", () => {
    expect(matches({ total: { $gt: 100, $lte: 120 } }, order)).toBe(true);
    expect(matches({ total: { $gt: "100" } }, order)).toBe(false);
    expect(matches({ total: { $lt: "999" } }, order)).toBe(false);
    expect(matches({ currency: { $gte: "EUR", $lt: "USD" } }, order)).toBe(true);
    expect(matches({ currency: { $gt: 1 } }, order)).toBe(false);
    expect(matches({ total: { $eq: "120" } }, order)).toBe(false);
  });

  it("tests membership, prefixes and containment", () => {
    expect(matches({ currency: { $in: ["EUR", "USD"] } }, order)).toBe(true);
    expect(matches({ currency: { $nin: ["EUR", "USD"] } }, order)).toBe(false);
    expect(matches({ "user.email": { $startsWith: "a@" } }, order)).toBe(true);
    expect(matches({ "user.email": { $contains: "example" } }, order)).toBe(true);
    expect(matches({ tags: { $contains: "vip" } }, order)).toBe(true);
    expect(matches({ tags: { $contains: "vi" } }, order)).toBe(false);
    expect(matches({ items: { $contains: { sku: "A" } } }, order)).toBe(true);
    expect(matches({ total: { $contains: 1 } }, order)).toBe(false);
    expect(matches({ "user.email": { $contains: 1 } }, order)).toBe(false);
  });

  it("matches a missing path only with $exists:false, $neq, $nin and negations", () => {
    const missing = "user.phone";
    expect(matches({ [missing]: { $exists: false } }, order)).toBe(true);
    expect(matches({ [missing]: { $neq: "x" } }, order)).toBe(true);
    expect(matches({ [missing]: { $nin: ["x"] } }, order)).toBe(true);
    expect(matches({ [missing]: { $not: { $eq: null } } }, order)).toBe(true);
    for (const condition of [
      null,
      { $eq: null },
      { $in: [null] },
      { $gt: 0 },
      { $lt: "z" },
      { $startsWith: "" },
      { $contains: "" },
      { $exists: true },
    ])
      expect(matches({ [missing]: condition }, order)).toBe(false);
    expect(matches({ "currency.x": { $exists: false } }, order)).toBe(true);
    expect(matches({ a: { $exists: false } }, "not an object")).toBe(true);
    expect(matches({ a: { $exists: true } }, { a: null })).toBe(true);
  });

  it("combines with $and, $or and $not", () => {
    expect(matches({ $or: [{ currency: "USD" }, { total: { $gte: 100 } }] }, order)).toBe(true);
    expect(matches({ $and: [{ currency: "EUR" }, { total: { $lt: 100 } }] }, order)).toBe(false);
    expect(matches({ $not: { currency: "EUR" } }, order)).toBe(false);
    expect(matches({ total: { $not: { $lt: 100 } } }, order)).toBe(true);
    expect(matches({ total: { $not: 120 } }, order)).toBe(false);
  });

  it("never reads inherited properties", () => {
    expect(matches({ constructor: { $exists: true } }, {})).toBe(false);
    expect(matches({ "a.toString": { $exists: true } }, { a: {} })).toBe(false);
    expect(matches({ __proto__: { $exists: true } }, JSON.parse('{"__proto__": 1}'))).toBe(true);
  });
});

describe("FilterPredicates", () => {
  it("compiles each distinct filter text once and stays bounded", () => {
    const cache = new FilterPredicates(2);
    const a = cache.predicateFor({ n: 1 });
    expect(cache.predicateFor({ n: 1 })).toBe(a);
    cache.predicateFor({ n: 2 });
    cache.predicateFor({ n: 3 });
    expect(cache.size).toBe(2);
    expect(cache.predicateFor({ n: 1 })).not.toBe(a);
  });

  it("matches nothing with a filter it cannot compile (fail closed)", () => {
    const cache = new FilterPredicates();
    expect(cache.predicateFor({ n: { $regex: "x" } })({ n: "x" }, unmetered())).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------
// Property: the compiled predicate agrees with an obviously-correct interpreter of the grammar.

const MISSING = Symbol("missing");

function refGet(payload: unknown, path: string): unknown {
  let v: unknown = payload;
  for (const seg of path.split(".")) {
    if (Array.isArray(v) && /^(0|[1-9][0-9]*)$/.test(seg) && Number(seg) < v.length) v = v[Number(seg)];
    else if (v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).includes(seg))
      v = (v as Record<string, unknown>)[seg];
    else return MISSING;
  }
  return v;
}

/** Canonical JSON: keys sorted at every level, so equal values have equal text. */
function canon(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon(o[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}
const same = (a: unknown, b: unknown) => a !== MISSING && canon(a) === canon(b);

function refCondition(v: unknown, cond: unknown): boolean {
  const isOps = cond !== null && typeof cond === "object" && !Array.isArray(cond) && Object.keys(cond).some((k) => k.startsWith("$"));
  if (!isOps) return same(v, cond);
  return Object.entries(cond as Record<string, unknown>).every(([op, x]) => {
    const comparable = (typeof v === "number" && typeof x === "number") || (typeof v === "string" && typeof x === "string");
    const a = v as number;
    const b = x as number;
    if (op === "$eq") return same(v, x);
    if (op === "$neq") return !same(v, x);
    if (op === "$gt") return comparable && a > b;
    if (op === "$gte") return comparable && a >= b;
    if (op === "$lt") return comparable && a < b;
    if (op === "$lte") return comparable && a <= b;
    if (op === "$in") return (x as unknown[]).some((m) => same(v, m));
    if (op === "$nin") return !(x as unknown[]).some((m) => same(v, m));
    if (op === "$exists") return (v !== MISSING) === x;
    if (op === "$startsWith") return typeof v === "string" && v.startsWith(x as string);
    if (op === "$contains") {
      if (typeof v === "string") return typeof x === "string" && v.includes(x);
      return Array.isArray(v) && v.some((m) => same(m, x));
    }
    if (op === "$not") return !refCondition(v, x);
    throw new Error(`reference: unknown ${op}`);
  });
}

function refMatch(filter: Record<string, unknown>, payload: unknown): boolean {
  return Object.entries(filter).every(([key, value]) => {
    if (key === "$and") return (value as Record<string, unknown>[]).every((f) => refMatch(f, payload));
    if (key === "$or") return (value as Record<string, unknown>[]).some((f) => refMatch(f, payload));
    if (key === "$not") return !refMatch(value as Record<string, unknown>, payload);
    return refCondition(refGet(payload, key), value);
  });
}

// Small domains, so that generated filters and payloads often meet (equal values, present paths).
const scalar = fc.oneof(fc.integer({ min: -2, max: 2 }), fc.constantFrom("", "a", "ab", "b"), fc.boolean(), fc.constant(null));
const value = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    { arbitrary: scalar, weight: 4 },
    fc.array(tie("v"), { maxLength: 3 }),
    fc.dictionary(fc.constantFrom("a", "b", "c"), tie("v"), { maxKeys: 3 }),
  ),
})).v;
const payload = fc.record({ a: value, b: value, c: value }, { requiredKeys: [] });
const path = fc.constantFrom("a", "b", "c", "a", "b", "a.b", "a.0", "a.00", "b.1", "c.a.b", "a.0.a", "z");

const operator = fc.oneof(
  fc.record({ $eq: value }),
  fc.record({ $neq: value }),
  {
    arbitrary: fc
      .tuple(fc.constantFrom("$gt", "$gte", "$lt", "$lte"), fc.oneof(fc.integer({ min: -2, max: 2 }), fc.constantFrom("", "a", "b")))
      .map(([op, x]) => ({ [op]: x })),
    weight: 4,
  },
  fc.record({ $in: fc.array(value, { maxLength: 3 }) }),
  fc.record({ $nin: fc.array(value, { maxLength: 3 }) }),
  fc.record({ $exists: fc.boolean() }),
  fc.record({ $startsWith: fc.constantFrom("", "a", "b") }),
  fc.record({ $contains: value }),
);
const condition = fc.oneof(
  scalar,
  value.filter((v) => !(v !== null && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 0)),
  operator,
  fc.tuple(operator, operator).map(([a, b]) => ({ ...a, ...b })),
  operator.map((o) => ({ $not: o })),
);
const filter = fc.letrec<{ f: Record<string, unknown> }>((tie) => ({
  f: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.dictionary(path, condition, { minKeys: 1, maxKeys: 3 }),
    fc.record({ $and: fc.array(tie("f"), { minLength: 1, maxLength: 3 }) }),
    fc.record({ $or: fc.array(tie("f"), { minLength: 1, maxLength: 3 }) }),
    fc.record({ $not: tie("f") }),
  ),
})).f;

describe("compileFilter agrees with a reference interpreter", () => {
  it("on generated filters and payloads", () => {
    fc.assert(
      fc.property(filter, fc.array(payload, { minLength: 1, maxLength: 5 }), (f, payloads) => {
        let compiled: ReturnType<typeof compileFilter> | undefined;
        try {
          compiled = compileFilter(f);
        } catch (err) {
          // Only the bounds may refuse a generated filter.
          expect((err as Error).message).toMatch(/more than|deeper than/);
          return;
        }
        for (const p of payloads) expect(evaluateFilter(compiled, p, unmetered())).toBe(refMatch(f, p));
      }),
      { numRuns: 3000 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// The visit budget: an evaluation stops where its meter runs out and answers TOO_COSTLY.

/** `items` behind a proxy that counts reads of its elements (what an evaluation looked at). */
function counted(items: unknown[]): { list: unknown[]; reads: () => number } {
  let reads = 0;
  const list = new Proxy(items, {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) reads++;
      return Reflect.get(target, key, receiver);
    },
  });
  return { list, reads: () => reads };
}

/** One `$or` of `n` `$contains` on `items`, none of which matches. */
const manyContains = (n: number) => ({ $or: Array.from({ length: n }, (_, i) => ({ items: { $contains: `absent-${i}` } })) });

describe("evaluateFilter within a visit budget", () => {
  it("stops a filter that would visit more than its budget, having looked at no more than that", () => {
    const filter = parseSubscriptionFilter(manyContains(63)) as SubscriptionFilter;
    const { list, reads } = counted(new Array(200_000).fill(0));
    const meter = { left: 10_000 };
    expect(evaluateFilter(compileFilter(filter), { items: list }, meter)).toBe(TOO_COSTLY);
    expect(meter.left).toBeLessThan(0);
    // 63 × 200,000 reads without the budget.
    expect(reads()).toBeLessThanOrEqual(10_000);
  });

  it("answers as before when the budget covers the work, and counts what it spent", () => {
    const filter = compileFilter({ tags: { $contains: "vip" }, order: { $gte: 40 } });
    const meter = { left: 100 };
    // Two one-segment paths, and three elements looked at to find "vip".
    expect(evaluateFilter(filter, { tags: ["a", "b", "vip", "c"], order: 42 }, meter)).toBe(true);
    expect(100 - meter.left).toBe(5);
    expect(evaluateFilter(filter, { tags: ["a"], order: 42 }, { left: 100 })).toBe(false);
    // Exactly the work needed is enough; one visit less is not.
    expect(evaluateFilter(filter, { tags: ["a", "b", "vip", "c"], order: 42 }, { left: 5 })).toBe(true);
    expect(evaluateFilter(filter, { tags: ["a", "b", "vip", "c"], order: 42 }, { left: 4 })).toBe(TOO_COSTLY);
    // A path costs a visit per segment, the literal compared one more.
    const deep = { left: 10 };
    expect(evaluateFilter(compileFilter({ "a.b.c": 1 }), { a: { b: { c: 1 } } }, deep)).toBe(true);
    expect(10 - deep.left).toBe(4);
  });

  it("charges a string search one visit per character, before searching", () => {
    const filter = compileFilter({ text: { $contains: "needle" } });
    expect(evaluateFilter(filter, { text: `${"x".repeat(1000)}needle` }, { left: 1007 })).toBe(true);
    expect(evaluateFilter(filter, { text: `${"x".repeat(1000)}needle` }, { left: 1006 })).toBe(TOO_COSTLY);
  });

  it("charges an object compared for equality one visit per key of the payload's object, once it has the filter's keys", () => {
    const big = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i]));
    const filter = compileFilter({ obj: { a: 1 } });
    expect(evaluateFilter(filter, { obj: { a: 1, ...big } }, { left: 1000 })).toBe(TOO_COSTLY);
    expect(evaluateFilter(filter, { obj: { a: 1, ...big } }, { left: 6000 })).toBe(false);
    // Without the filter's key it is refused before its keys are counted.
    expect(evaluateFilter(filter, { obj: big }, { left: 10 })).toBe(false);
    const members = counted(Array.from({ length: 100_000 }, () => ({ b: 2 })));
    expect(evaluateFilter(compileFilter({ list: { $contains: { a: 1 } } }), { list: members.list }, { left: 1000 })).toBe(TOO_COSTLY);
    expect(members.reads()).toBeLessThanOrEqual(1000);
  });

  it("shares one meter between the filters of an event: once spent, every later one is TOO_COSTLY at once", () => {
    const costly = compileFilter(manyContains(10));
    const cheap = compileFilter({ n: 1 });
    const meter = { left: 50 };
    const payload = { items: new Array(100).fill(0), n: 1 };
    expect(evaluateFilter(cheap, payload, meter)).toBe(true);
    expect(evaluateFilter(costly, payload, meter)).toBe(TOO_COSTLY);
    expect(evaluateFilter(cheap, payload, meter)).toBe(TOO_COSTLY);
  });

  it("never gives a wrong answer: within any budget it is the unbounded answer or TOO_COSTLY, and enough budget gives the answer", () => {
    fc.assert(
      fc.property(filter, payload, fc.nat({ max: 40 }), (f, p, budget) => {
        let compiled: ReturnType<typeof compileFilter>;
        try {
          compiled = compileFilter(f);
        } catch {
          return;
        }
        const free = { left: Number.POSITIVE_INFINITY };
        const unbounded = evaluateFilter(compiled, p, { left: 1_000_000 });
        expect(unbounded).toBe(evaluateFilter(compiled, p, free));
        expect(unbounded).toBe(refMatch(f, p));
        const meter = { left: budget };
        const bounded = evaluateFilter(compiled, p, meter);
        if (bounded === TOO_COSTLY) return;
        expect(bounded).toBe(unbounded);
        // What it spent is what the unbounded run spends: the same work, whatever the budget.
        const full = { left: 1_000_000 };
        evaluateFilter(compiled, p, full);
        expect(budget - meter.left).toBe(1_000_000 - full.left);
      }),
      { numRuns: 3000 },
    );
  });
});
