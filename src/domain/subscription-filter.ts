import { ValidationError } from "./errors.js";

/**
 * Subscription filters (SPEC §12): a JSON object matched against an event's payload before any
 * delivery or source run. Pure: the API validates a filter here (`parseSubscriptionFilter`), the
 * subscription record stores it as given, and fan-out compiles it once into a predicate
 * (`FilterPredicates`) that it applies to each event.
 *
 * Grammar (docs/decisions.md "Subscription filters"):
 *   filter    := { key: condition, ... }                 every key must hold (an implicit $and)
 *   key       := a dotted path ("a.b.0.c")  | "$and" | "$or" (non-empty array of filters) | "$not" (a filter)
 *   condition := a literal (deep equality)  | { "$op": operand, ... } (every operator must hold)
 *   $op       := $eq $neq $gt $gte $lt $lte $in $nin $exists $startsWith $contains | $not (a condition)
 *
 * Semantics: comparisons are type-strict (like MongoDB: `$gt` on a string against a number is
 * false; numbers compare with numbers, strings with strings by UTF-16 code units); equality is deep
 * (object key order does not matter); a missing path matches only `$exists: false`, `$neq`, `$nin`
 * (and a `$not` of anything else); a numeric path segment indexes an array; `$contains` is a
 * substring test on strings and a deep-equal member test on arrays.
 *
 * Cost: a filter's size is bounded, but the payload's is not, so every evaluation is metered in
 * visits (`VisitMeter`): one per path segment looked up, per value or array element compared, per
 * key of a payload object compared, per string character searched. An evaluation that runs out
 * stops early and answers TOO_COSTLY (`evaluateFilter`); fan-out decides what each event may spend
 * (domain/filter-budget.ts).
 */

/** A validated filter, as stored and returned (a JSON object). */
export type SubscriptionFilter = { readonly [key: string]: unknown };

/**
 * The visits an evaluation may still make. Spent (below zero) means the evaluation stopped early:
 * every test then answers false at once, and the answer is TOO_COSTLY whatever the predicate says.
 */
export interface VisitMeter {
  left: number;
}

/** Whether `payload` matches, spending `meter`; read the answer through `evaluateFilter`. */
export type FilterPredicate = (payload: unknown, meter: VisitMeter) => boolean;

/** The answer of an evaluation that needed more visits than it had. */
export const TOO_COSTLY = "too_costly";
export type FilterAnswer = boolean | typeof TOO_COSTLY;

/** Evaluates `accepts` on `payload` within what `meter` has left (shared by the filters of one event). */
export function evaluateFilter(accepts: FilterPredicate, payload: unknown, meter: VisitMeter): FilterAnswer {
  const matched = accepts(payload, meter);
  return meter.left < 0 ? TOO_COSTLY : matched;
}

/** Spends `cost` visits when `meter` has them; otherwise marks it spent without doing the work. */
function afford(meter: VisitMeter, cost: number): boolean {
  if (cost <= meter.left) {
    meter.left -= cost;
    return true;
  }
  if (meter.left >= 0) meter.left = -1;
  return false;
}

/** Bounds on a filter (each named in the 400 that refuses one past it). */
export const FILTER_LIMITS = {
  /** The filter's JSON text, in UTF-16 code units (about bytes for ASCII). */
  maxChars: 4096,
  /** Object and array nesting of the filter document, counting the filter itself as 1. */
  maxDepth: 10,
  /** Path conditions plus operators in the whole filter. */
  maxConditions: 64,
  /** Segments in one dotted path. */
  maxPathSegments: 16,
} as const;

const COMPARISONS = ["$gt", "$gte", "$lt", "$lte"] as const;
const FIELD_OPERATORS = new Set(["$eq", "$neq", ...COMPARISONS, "$in", "$nin", "$exists", "$startsWith", "$contains", "$not"]);
const COMBINATORS = new Set(["$and", "$or", "$not"]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isOperatorObject = (v: unknown): v is Record<string, unknown> => isObject(v) && Object.keys(v).some((k) => k.startsWith("$"));

/** Nesting depth of a JSON value (a scalar is 0, `{}` is 1). Iterative. */
function depthOf(value: unknown): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, d] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== "object") continue;
    if (d + 1 > max) max = d + 1;
    if (max > FILTER_LIMITS.maxDepth) return max;
    for (const child of Object.values(v)) stack.push([child, d + 1]);
  }
  return max;
}

const problem = (message: string) => new ValidationError(`filter: ${message}`);

/**
 * Reads `filter` from the request parameters: undefined when absent (a re-posted subscription
 * keeps its filter), null when cleared (`null`, `""` or `{}`), else the validated filter. From the
 * query string it is JSON text. Throws a ValidationError naming the path and operator at fault.
 */
export function parseSubscriptionFilter(raw: unknown): SubscriptionFilter | null | undefined {
  if (raw === undefined) return undefined;
  if (raw === null || raw === "") return null;
  let value = raw;
  if (typeof raw === "string") {
    if (raw.length > FILTER_LIMITS.maxChars) throw problem(`must be at most ${FILTER_LIMITS.maxChars} characters of JSON`);
    try {
      value = JSON.parse(raw);
    } catch {
      throw new ValidationError("filter must be a JSON object");
    }
  }
  if (!isObject(value)) throw new ValidationError("filter must be a JSON object");
  if (JSON.stringify(value).length > FILTER_LIMITS.maxChars) throw problem(`must be at most ${FILTER_LIMITS.maxChars} characters of JSON`);
  if (depthOf(value) > FILTER_LIMITS.maxDepth) throw problem(`nests deeper than ${FILTER_LIMITS.maxDepth} levels`);
  if (Object.keys(value).length === 0) return null;
  compile(value, { conditions: 0 });
  return value;
}

/** Compiles a filter already accepted by `parseSubscriptionFilter` (throws a ValidationError otherwise). */
export function compileFilter(filter: SubscriptionFilter): FilterPredicate {
  if (depthOf(filter) > FILTER_LIMITS.maxDepth) throw problem(`nests deeper than ${FILTER_LIMITS.maxDepth} levels`);
  return compile(filter, { conditions: 0 });
}

interface Budget {
  conditions: number;
}

function spend(budget: Budget): void {
  if (++budget.conditions > FILTER_LIMITS.maxConditions) throw problem(`has more than ${FILTER_LIMITS.maxConditions} conditions`);
}

/** A filter object: every key must hold. */
function compile(filter: Record<string, unknown>, budget: Budget, at = ""): FilterPredicate {
  const parts: FilterPredicate[] = [];
  for (const [key, value] of Object.entries(filter)) {
    const where = at ? `${at}.${key}` : key;
    if (key.startsWith("$")) {
      if (!COMBINATORS.has(key)) throw problem(`unknown operator ${key}${at ? ` at ${at}` : ""} (at the top of a filter: $and, $or, $not)`);
      spend(budget);
      if (key === "$not") {
        if (!isObject(value)) throw problem(`${where} must be a filter object`);
        const inner = compile(value, budget, where);
        parts.push((p, m) => !inner(p, m));
        continue;
      }
      if (!Array.isArray(value) || value.length === 0) throw problem(`${where} must be a non-empty array of filter objects`);
      const inner = value.map((f, i) => {
        if (!isObject(f)) throw problem(`${where}[${i}] must be a filter object`);
        return compile(f, budget, `${where}[${i}]`);
      });
      parts.push(key === "$and" ? (p, m) => inner.every((f) => f(p, m)) : (p, m) => inner.some((f) => f(p, m)));
      continue;
    }
    const path = parsePath(key);
    spend(budget);
    const test = compileCondition(value, budget, key);
    // One visit per segment looked up.
    const cost = path.length;
    parts.push((p, m) => afford(m, cost) && test(resolve(p, path), m));
  }
  if (parts.length === 1) return parts[0] as FilterPredicate;
  return (p, m) => {
    for (const f of parts) if (!f(p, m)) return false;
    return true;
  };
}

function parsePath(key: string): readonly string[] {
  const segments = key.split(".");
  if (segments.some((s) => s === "")) throw problem(`path ${JSON.stringify(key)} has an empty segment`);
  if (segments.length > FILTER_LIMITS.maxPathSegments)
    throw problem(`path ${JSON.stringify(key)} has more than ${FILTER_LIMITS.maxPathSegments} segments`);
  return segments;
}

/** What a path resolves to; MISSING when some segment is absent. */
const MISSING: unique symbol = Symbol("missing");
type Resolved = unknown | typeof MISSING;

const ARRAY_INDEX = /^(0|[1-9]\d{0,8})$/;

function resolve(payload: unknown, path: readonly string[]): Resolved {
  let v: unknown = payload;
  for (const segment of path) {
    if (Array.isArray(v)) {
      if (!ARRAY_INDEX.test(segment)) return MISSING;
      const i = Number(segment);
      if (i >= v.length) return MISSING;
      v = v[i];
    } else if (isObject(v) && Object.hasOwn(v, segment)) {
      v = v[segment];
    } else {
      return MISSING;
    }
  }
  return v;
}

type ValueTest = (v: Resolved, meter: VisitMeter) => boolean;

/** A literal (deep equality) or an operator object (every operator must hold). */
function compileCondition(condition: unknown, budget: Budget, path: string): ValueTest {
  if (!isOperatorObject(condition)) {
    const equal = equalTo(condition);
    return (v, m) => v !== MISSING && equal(v, m);
  }
  const tests: ValueTest[] = [];
  for (const [op, operand] of Object.entries(condition)) {
    if (!op.startsWith("$")) throw problem(`at ${path}: an operator object cannot also have the field ${JSON.stringify(op)}`);
    if (!FIELD_OPERATORS.has(op)) throw problem(`unknown operator ${op} at ${path}`);
    if (tests.length > 0) spend(budget);
    tests.push(compileOperator(op, operand, budget, path));
  }
  if (tests.length === 1) return tests[0] as ValueTest;
  return (v, m) => tests.every((t) => t(v, m));
}

function compileOperator(op: string, operand: unknown, budget: Budget, path: string): ValueTest {
  const bad = (what: string) => problem(`${op} at ${path} ${what}`);
  switch (op) {
    case "$eq": {
      const equal = equalTo(operand);
      return (v, m) => v !== MISSING && equal(v, m);
    }
    case "$neq": {
      const equal = equalTo(operand);
      return (v, m) => v === MISSING || !equal(v, m);
    }
    case "$gt":
    case "$gte":
    case "$lt":
    case "$lte": {
      if (typeof operand !== "number" && typeof operand !== "string") throw bad("needs a number or a string");
      const holds = ORDER[op];
      return (v) => typeof v === typeof operand && holds(v as number | string, operand);
    }
    case "$in":
    case "$nin": {
      if (!Array.isArray(operand)) throw bad("needs an array");
      // Scalars through a Set (same answers as deep equality: ===, and JSON has no NaN), so a long list costs one lookup.
      const scalars = new Set(operand.filter((m) => m === null || typeof m !== "object"));
      const composites = operand.filter((m) => m !== null && typeof m === "object").map(equalTo);
      const isIn = (v: Resolved, meter: VisitMeter) =>
        v !== MISSING && (v === null || typeof v !== "object" ? scalars.has(v) : composites.some((equal) => equal(v, meter)));
      return op === "$in" ? isIn : (v, m) => !isIn(v, m);
    }
    case "$exists":
      if (typeof operand !== "boolean") throw bad("needs true or false");
      return operand ? (v) => v !== MISSING : (v) => v === MISSING;
    case "$startsWith":
      if (typeof operand !== "string") throw bad("needs a string");
      return (v) => typeof v === "string" && v.startsWith(operand);
    case "$contains":
      if (operand !== null && typeof operand === "object") {
        const equal = equalTo(operand);
        return (v, m) => Array.isArray(v) && containsEqual(v, equal, m);
      }
      return (v, m) =>
        typeof v === "string"
          ? typeof operand === "string" && afford(m, v.length) && v.includes(operand)
          : Array.isArray(v) && containsScalar(v, operand, m);
    default: {
      // $not: a condition (a literal or an operator object), negated; true on a missing path.
      const inner = compileCondition(operand, budget, path);
      return (v, m) => !inner(v, m);
    }
  }
}

const ORDER: Record<(typeof COMPARISONS)[number], (a: number | string, b: number | string) => boolean> = {
  $gt: (a, b) => a > b,
  $gte: (a, b) => a >= b,
  $lt: (a, b) => a < b,
  $lte: (a, b) => a <= b,
};

/**
 * Whether `list` holds the scalar `x` (deep equality with a scalar is ===), one visit per element looked
 * at: only as many as `meter` affords are looked at.
 */
function containsScalar(list: readonly unknown[], x: unknown, meter: VisitMeter): boolean {
  if (list.length <= meter.left) {
    const at = list.indexOf(x);
    meter.left -= at < 0 ? list.length : at + 1;
    return at >= 0;
  }
  const reach = Math.max(meter.left, 0);
  for (let i = 0; i < reach; i++) {
    if (list[i] === x) {
      meter.left -= i + 1;
      return true;
    }
  }
  meter.left = -1;
  return false;
}

/** Whether `list` has a member `equal` accepts (one visit per member, and what comparing it costs). */
function containsEqual(list: readonly unknown[], equal: EqualTest, meter: VisitMeter): boolean {
  for (const member of list) {
    if (equal(member, meter)) return true;
    if (meter.left < 0) return false;
  }
  return false;
}

type EqualTest = (v: unknown, meter: VisitMeter) => boolean;

/**
 * Deep equality with the filter's value `x` (arrays by position, objects by key set regardless of
 * order), compiled once: one visit per value compared, and, for a payload object that has every
 * key of `x` with equal values, one per key it has (counting them costs as many, and a payload
 * object may have any number; one missing a key of `x` is refused before they are counted).
 */
function equalTo(x: unknown): EqualTest {
  if (x === null || typeof x !== "object") return (v, m) => --m.left >= 0 && v === x;
  if (Array.isArray(x)) {
    const items = x.map(equalTo);
    return (v, m) => {
      if (--m.left < 0 || !Array.isArray(v) || v.length !== items.length) return false;
      for (let i = 0; i < items.length; i++) if (!(items[i] as EqualTest)(v[i], m)) return false;
      return true;
    };
  }
  const record = x as Record<string, unknown>;
  const keys = Object.keys(record);
  const values = keys.map((k) => equalTo(record[k]));
  return (v, m) => {
    if (--m.left < 0 || v === null || typeof v !== "object" || Array.isArray(v)) return false;
    const o = v as Record<string, unknown>;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as string;
      if (!Object.hasOwn(o, k) || !(values[i] as EqualTest)(o[k], m)) return false;
    }
    // Every key of `x` is there with its value: equal when it has no other.
    const count = Object.keys(o).length;
    m.left -= count;
    return m.left >= 0 && count === keys.length;
  };
}

/** A filter no one can read (stored by a newer version, say) matches nothing: fail closed. */
const NOTHING: FilterPredicate = () => false;

/**
 * Compiled predicates by the filter's JSON text, so fan-out compiles each distinct filter once per
 * process rather than once per batch. Bounded: past `maxEntries` the oldest compiled goes first.
 */
export class FilterPredicates {
  private readonly compiled = new Map<string, FilterPredicate>();

  constructor(private readonly maxEntries = 4096) {}

  predicateFor(filter: SubscriptionFilter): FilterPredicate {
    const text = JSON.stringify(filter);
    const hit = this.compiled.get(text);
    if (hit) return hit;
    let predicate: FilterPredicate;
    try {
      predicate = compileFilter(filter);
    } catch {
      predicate = NOTHING;
    }
    if (this.compiled.size >= this.maxEntries) {
      const oldest = this.compiled.keys().next();
      if (!oldest.done) this.compiled.delete(oldest.value);
    }
    this.compiled.set(text, predicate);
    return predicate;
  }

  get size(): number {
    return this.compiled.size;
  }
}
