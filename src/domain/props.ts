import { CronExpressionParser } from "cron-parser";
import { ValidationError } from "./errors.js";

/**
 * Component props: what a component declares (`configurable_props`) and the values a source is
 * configured with (`configured_props`). Pure: the component's `props` object reaches this module
 * as plain JSON-able data copied out of the sandbox, with every function replaced by
 * `FUNCTION_MARKER`.
 */

/** One entry of `configurable_props`, in the shape the API returns. */
export interface PropDefinition {
  name: string;
  type: string;
  label?: string;
  description?: string;
  optional?: boolean;
  default?: unknown;
  secret?: boolean;
  min?: number;
  max?: number;
  options?: unknown[];
  /** Only on `$.interface.http`: the run answers the HTTP request itself. */
  customResponse?: boolean;
  /** Set instead of `options` when the component computes its options with a function. */
  remoteOptions?: boolean;
}

/**
 * What a function becomes when component data is copied out of the sandbox. An object with a key
 * no JSON author writes by accident, so a user string can never be mistaken for a function.
 */
export const FUNCTION_MARKER = Object.freeze({ $$tributaryFunction: true });

export function isFunctionMarker(value: unknown): boolean {
  return isPlainObject(value) && value.$$tributaryFunction === true;
}

export const HTTP_PROP = "$.interface.http";
export const TIMER_PROP = "$.interface.timer";
export const DB_PROP = "$.service.db";

/** Prop types whose values we check; every other type (app, apphook, ...) accepts any JSON. */
const VALUE_TYPES = new Set(["string", "integer", "boolean", "object", "any", "string[]", "integer[]", "boolean[]", "object[]"]);

export function normalizeProps(rawProps: unknown): PropDefinition[] {
  if (rawProps === undefined || rawProps === null) return [];
  if (!isPlainObject(rawProps)) throw new ValidationError("component props must be an object");
  // Object.keys keeps declaration order (integer-like names aside, which no prop uses in practice).
  return Object.keys(rawProps).map((name) => normalizeProp(name, rawProps[name]));
}

function normalizeProp(name: string, raw: unknown): PropDefinition {
  // Stored values are keyed by prop name; this one would set an object's prototype instead.
  if (name === "__proto__") throw new ValidationError("component prop __proto__ is not allowed");
  if (typeof raw === "string") return { name, type: raw };
  if (!isPlainObject(raw)) throw new ValidationError(`component prop ${name} must be a type name or an object with a type`);
  let type = raw.type;
  // `propDefinition` props borrow their type from an app we do not host; accept any value.
  if (type === undefined && raw.propDefinition !== undefined) type = "any";
  if (typeof type !== "string" || type === "") throw new ValidationError(`component prop ${name} must have a type`);
  const def: PropDefinition = { name, type };
  if (typeof raw.label === "string") def.label = raw.label;
  if (typeof raw.description === "string") def.description = raw.description;
  if (typeof raw.optional === "boolean") def.optional = raw.optional;
  if (raw.default !== undefined && !containsFunction(raw.default)) def.default = raw.default;
  if (typeof raw.secret === "boolean") def.secret = raw.secret;
  if (typeof raw.min === "number" && Number.isFinite(raw.min)) def.min = raw.min;
  if (typeof raw.max === "number" && Number.isFinite(raw.max)) def.max = raw.max;
  if (isFunctionMarker(raw.options)) def.remoteOptions = true;
  else if (Array.isArray(raw.options) && !containsFunction(raw.options)) def.options = raw.options;
  if (type === HTTP_PROP && typeof raw.customResponse === "boolean") def.customResponse = raw.customResponse;
  return def;
}

export interface PropValidationOptions {
  timerMinIntervalSeconds: number;
}

/**
 * Checks a source's `configured_props` against the component's props and returns the values to
 * store, in declaration order. HTTP props are omitted (the caller must not choose the endpoint; the
 * source service fills `{endpoint_url}`), as is `$.service.db` (the store holds its state). Timer
 * props come back as `{cron, interval_seconds}`.
 */
export function validateConfiguredProps(
  defs: readonly PropDefinition[],
  input: unknown,
  opts: PropValidationOptions,
): Record<string, unknown> {
  if (input !== undefined && input !== null && !isPlainObject(input)) throw new ValidationError("configured_props must be an object");
  const given: Record<string, unknown> = input ?? {};
  const byName = new Map(defs.map((d) => [d.name, d]));
  for (const name of Object.keys(given)) {
    if (!byName.has(name)) throw new ValidationError(`configured_props.${name} is not a prop of this component`);
  }
  const out: Record<string, unknown> = {};
  for (const def of defs) {
    // Own properties only: a prop named "constructor" must not read Object.prototype.constructor.
    const value = configuredValue(def, Object.hasOwn(given, def.name) ? given[def.name] : undefined, opts);
    if (value !== undefined) out[def.name] = value;
  }
  return out;
}

function configuredValue(def: PropDefinition, given: unknown, opts: PropValidationOptions): unknown {
  const where = `configured_props.${def.name}`;
  if (def.type === HTTP_PROP || def.type === DB_PROP) return undefined;
  if (def.type === TIMER_PROP) {
    const raw = given ?? def.default;
    if (raw === undefined || raw === null)
      throw new ValidationError(`${where} is required: give {"intervalSeconds": n} or {"cron": "..."}`);
    return normalizeTimer(raw, where, opts.timerMinIntervalSeconds);
  }
  // null means "not set", as a form would send it.
  if (given === undefined || given === null) {
    if (def.default !== undefined) return structuredClone(def.default);
    if (def.optional || !VALUE_TYPES.has(def.type)) return undefined;
    throw new ValidationError(`${where} is required`);
  }
  checkValue(def, given, where);
  return given;
}

function checkValue(def: PropDefinition, value: unknown, where: string): void {
  switch (def.type) {
    case "string":
    case "integer":
    case "boolean":
    case "object":
      checkScalar(def, def.type, value, where);
      return;
    case "string[]":
    case "integer[]":
    case "boolean[]":
    case "object[]": {
      const item = def.type.slice(0, -2);
      if (!Array.isArray(value)) throw new ValidationError(`${where} must be an array of ${item}s`);
      for (const [i, v] of value.entries()) checkScalar(def, item, v, `${where}[${i}]`);
      return;
    }
    default:
      // `any` and types we do not model (app, apphook, ...) take any JSON value.
      return;
  }
}

function checkScalar(def: PropDefinition, type: string, value: unknown, where: string): void {
  const ok =
    (type === "string" && typeof value === "string") ||
    (type === "integer" && Number.isSafeInteger(value)) ||
    (type === "boolean" && typeof value === "boolean") ||
    (type === "object" && isPlainObject(value));
  if (!ok) throw new ValidationError(`${where} must be ${type === "integer" ? "an" : "a"} ${type}`);
  if (typeof value === "number") {
    if (def.min !== undefined && value < def.min) throw new ValidationError(`${where} must be at least ${def.min}`);
    if (def.max !== undefined && value > def.max) throw new ValidationError(`${where} must be at most ${def.max}`);
  }
  const allowed = literalOptions(def);
  if (allowed && !allowed.some((a) => a === value)) {
    throw new ValidationError(`${where} must be one of: ${allowed.map((a) => JSON.stringify(a)).join(", ")}`);
  }
}

/** Values allowed by literal `options` (plain values or `{label, value}`), or undefined when unconstrained. */
function literalOptions(def: PropDefinition): unknown[] | undefined {
  if (!def.options || def.options.length === 0) return undefined;
  return def.options.map((o) => (isPlainObject(o) && "value" in o ? o.value : o));
}

/** How a timer prop is stored and shown: exactly one of the two is set. */
export interface TimerValue {
  cron: string | null;
  interval_seconds: number | null;
}

/**
 * Accepts `{intervalSeconds}` (the component/API spelling), `{interval_seconds}` (the stored
 * spelling, so a source's own configured_props can be posted back) or `{cron}`.
 */
function normalizeTimer(raw: unknown, where: string, minSeconds: number): TimerValue {
  if (!isPlainObject(raw)) throw new ValidationError(`${where} must be an object with intervalSeconds or cron`);
  const interval = raw.intervalSeconds ?? raw.interval_seconds ?? null;
  const cron = raw.cron ?? null;
  if (interval !== null && cron !== null) throw new ValidationError(`${where} takes either intervalSeconds or cron, not both`);
  if (cron !== null) {
    if (typeof cron !== "string") throw new ValidationError(`${where}.cron must be a string`);
    checkCron(cron, where, minSeconds);
    return { cron: cron.trim(), interval_seconds: null };
  }
  if (interval === null) throw new ValidationError(`${where} must have intervalSeconds or cron`);
  if (!Number.isSafeInteger(interval)) throw new ValidationError(`${where}.intervalSeconds must be an integer`);
  if ((interval as number) < minSeconds) throw new ValidationError(`${where}.intervalSeconds must be at least ${minSeconds}`);
  return { cron: null, interval_seconds: interval as number };
}

/** Fixed reference time, so checking how often a cron fires does not depend on the clock. */
const CRON_SAMPLE_FROM = new Date("2024-01-01T00:00:00Z");

function checkCron(cron: string, where: string, minSeconds: number): void {
  const text = cron.trim();
  const fields = text.split(/\s+/).length;
  // cron-parser fills missing fields with "*", so "" or "* *" would silently mean "every minute".
  if (!text.startsWith("@") && fields !== 5 && fields !== 6) {
    throw new ValidationError(`${where}.cron must have 5 fields (or 6 with seconds)`);
  }
  let next: Date[];
  try {
    const expr = CronExpressionParser.parse(text, { currentDate: CRON_SAMPLE_FROM, tz: "UTC" });
    next = expr.take(12).map((d) => d.toDate());
  } catch (err) {
    throw new ValidationError(`${where}.cron is not a valid cron expression: ${(err as Error).message}`);
  }
  // A seconds field could fire far more often than the interval floor allows; sample a few gaps.
  for (let i = 1; i < next.length; i++) {
    const gap = (next[i]!.getTime() - next[i - 1]!.getTime()) / 1000;
    if (gap < minSeconds) throw new ValidationError(`${where}.cron fires more often than every ${minSeconds} seconds`);
  }
}

function containsFunction(value: unknown): boolean {
  if (isFunctionMarker(value)) return true;
  if (Array.isArray(value)) return value.some(containsFunction);
  if (isPlainObject(value)) return Object.values(value).some(containsFunction);
  return false;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
