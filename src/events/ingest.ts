import { channelNameProblem } from "../domain/channel-name.js";
import { MAX_EMIT_ID_LENGTH, MAX_SUMMARY_LENGTH } from "../domain/emit-rules.js";
import { type TooManyRequestsError, ValidationError } from "../domain/errors.js";
import { storedBytesLimitReached, streamLimitReached } from "../domain/limits.js";
import { newId, type RandomBytes } from "../domain/ids.js";
import type { Metrics } from "../observability/metrics.js";
import type { EmitMeta, EmitterKind, EventStore, GuardKeyOf, IngressCharge, NewEvent, StorageRefusal } from "../store/events.js";

export const MAX_BATCH = 1000;

/** One emit as the ingress accepts it. */
export interface EmitInput {
  event: unknown;
  name: string;
  meta: EmitMeta;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** An emit's `name` (domain/channel-name.ts has the rule, shared with subscriptions and summaries). */
export function parseChannelName(raw: unknown, where: string): string {
  if (raw === undefined || raw === null) return "";
  if (typeof raw !== "string") throw new ValidationError(`${where}name must be a string`);
  const problem = channelNameProblem(raw);
  if (problem) throw new ValidationError(`${where}name ${problem}`);
  return raw;
}

/** Validates `{event, name?, id?, summary?, ts?}`; `where` prefixes messages for batch items. */
export function parseEmit(raw: unknown, where = ""): EmitInput {
  if (!isObject(raw)) throw new ValidationError(`${where || "body"} must be an object with an event`);
  if (!("event" in raw) || raw.event === undefined) throw new ValidationError(`${where}event is required`);
  const meta: EmitMeta = {};
  if (raw.id !== undefined && raw.id !== null) {
    if (typeof raw.id === "string" ? raw.id.length > MAX_EMIT_ID_LENGTH : typeof raw.id !== "number" || !Number.isFinite(raw.id)) {
      throw new ValidationError(`${where}id must be a string or a number`);
    }
    meta.id = raw.id as string | number;
  }
  if (raw.summary !== undefined && raw.summary !== null) {
    if (typeof raw.summary !== "string" || raw.summary.length > MAX_SUMMARY_LENGTH)
      throw new ValidationError(`${where}summary must be a string`);
    meta.summary = raw.summary;
  }
  if (raw.ts !== undefined && raw.ts !== null) {
    if (typeof raw.ts !== "number" || !Number.isFinite(raw.ts)) throw new ValidationError(`${where}ts must be a number (epoch ms)`);
    meta.ts = raw.ts;
  }
  return { event: raw.event, name: parseChannelName(raw.name, where), meta };
}

/** `{event...}` or `{events: [...]}` (at most 1000). */
export function parseEmitBody(body: unknown): { batch: boolean; emits: EmitInput[] } {
  if (isObject(body) && "events" in body) {
    const list = body.events;
    if (!Array.isArray(list)) throw new ValidationError("events must be an array of {event, name?, id?, summary?, ts?}");
    if (list.length === 0) throw new ValidationError("events must not be empty");
    if (list.length > MAX_BATCH) throw new ValidationError(`events holds at most ${MAX_BATCH} items`);
    return { batch: true, emits: list.map((item, i) => parseEmit(item, `events[${i}].`)) };
  }
  return { batch: false, emits: [parseEmit(body)] };
}

/** The 429 of a record the user's storage limits refused (nothing of the request was recorded). */
function storageLimitError(r: StorageRefusal): TooManyRequestsError {
  return r.limit === "streams" ? streamLimitReached(r.streams, r.max) : storedBytesLimitReached(r.bytes, r.adding, r.max);
}

/**
 * What ingest needs from the workflow registry (services/workflows.ts implements it): the key of a
 * workflow's record, and registering a workflow on its first emit (which applies auto-subscriptions).
 */
export interface WorkflowRegistry {
  recordKey(userId: string, id: string): string;
  ensure(userId: string, id: string): Promise<void>;
}

/** What ingest needs of the per-user ingress rate (services/ingress-rate.ts implements it). */
export interface IngressAdmission {
  /** Takes `events` tokens now, or throws 429/413. */
  admit(userId: string, events: number): Promise<void>;
  /** The charge a record takes in its own step (undefined: unlimited), or throws 413 for a batch that can never pass. */
  charge(userId: string, events: number): IngressCharge | undefined;
  /** The 429 for a charge the bucket could not pay. */
  refused(waitMs: number): Error;
}

/**
 * A key a record requires (store/events.ts `recordGuarded`), and what makes it exist when it is
 * missing, both for the record's user and emitter.
 */
export interface RecordGuard {
  readonly keyOf: GuardKeyOf;
  ensure(userId: string, emitterId: string): Promise<void>;
}

/**
 * Records events for an emitter. Consecutive events on the same channel go in one atomic script
 * call; the ids come back in input order.
 */
export class Ingest {
  /** A workflow emit's guard: its workflow's record, registered when missing (one object, so emits share a record target). */
  private readonly workflowGuard: RecordGuard = {
    keyOf: (userId, workflowId) => this.workflows.recordKey(userId, workflowId),
    ensure: (userId, workflowId) => this.workflows.ensure(userId, workflowId),
  };

  constructor(
    private readonly events: EventStore,
    private readonly workflows: WorkflowRegistry,
    private readonly metrics: Metrics,
    private readonly now: () => number,
    private readonly randomBytes: RandomBytes,
    /** The per-user ingress rate (services/ingress-rate.ts); none = unlimited. */
    private readonly rate?: IngressAdmission,
  ) {}

  async recordFor(
    userId: string,
    emitterId: string,
    kind: EmitterKind,
    emits: readonly EmitInput[],
    hops = 0,
    guard?: RecordGuard,
    /** Tokens of the user's ingress bucket, taken by the first record step (all or nothing). */
    charge?: IngressCharge,
  ): Promise<string[]> {
    const acceptedAtMs = this.now();
    let unpaid = charge;
    const ids: string[] = [];
    let i = 0;
    while (i < emits.length) {
      const channel = emits[i]?.name ?? "";
      const run: NewEvent[] = [];
      while (i < emits.length && emits[i]?.name === channel) {
        const e = emits[i] as EmitInput;
        run.push({ payload: e.event, meta: e.meta, emitId: newId("emit_", this.randomBytes) });
        i++;
      }
      const input = { userId, emitterId, emitterKind: kind, channel, events: run, hops, acceptedAtMs };
      let recorded = await this.events.recordGuarded(input, guard?.keyOf, unpaid);
      if (recorded === null) {
        // The guard key (the workflow record) is missing: register first, then record.
        await guard?.ensure(userId, emitterId);
        recorded = await this.events.recordGuarded(input, undefined, unpaid);
      }
      if (recorded === null) throw new Error("an unguarded record wrote nothing");
      if ("waitMs" in recorded) {
        // The bucket could not pay: nothing of the request was recorded (the charge is the first step).
        throw this.rate ? this.rate.refused(recorded.waitMs) : new Error("an ingress charge without an ingress rate");
      }
      if ("refused" in recorded) throw storageLimitError(recorded.refused);
      unpaid = undefined;
      ids.push(...recorded.ids);
      this.metrics.countIngested(kind, channel, run.length);
    }
    return ids;
  }

  /**
   * A workflow's $send.emit(): registers the workflow first (auto-subscriptions before fan-out).
   * Every event of a batch counts against the user's ingress rate (429 past it, nothing recorded);
   * the record script takes the tokens itself, in the step that checks that the workflow record
   * exists and records, so a known workflow's emit is one round trip. An unknown (or deleted) one is
   * registered first and its events recorded (and charged) after.
   */
  workflowEmit(userId: string, workflowId: string, emits: readonly EmitInput[]): Promise<string[]> {
    // Not async (the emit's hot path): a 413 from `charge` throws to the caller, which awaits this.
    const charge = this.rate?.charge(userId, emits.length);
    return this.recordFor(userId, workflowId, "workflow", emits, 0, this.workflowGuard, charge);
  }

  /** A workflow error on $errors, with original_context filled in (SPEC §3). */
  async workflowError(userId: string, workflowId: string, body: unknown, version: string): Promise<string> {
    if (!isObject(body)) throw new ValidationError("body must be an object with original_event and error");
    const error = body.error ?? {};
    if (!isObject(error)) throw new ValidationError("error must be an object {code?, msg?, stack?, cellId?, ts?}");
    for (const f of ["code", "msg", "stack", "cellId", "ts"]) {
      if (error[f] !== undefined && error[f] !== null && typeof error[f] !== "string")
        throw new ValidationError(`error.${f} must be a string`);
    }
    const ctxIn = body.original_context ?? {};
    if (!isObject(ctxIn)) throw new ValidationError("original_context must be an object");
    await this.rate?.admit(userId, 1);
    await this.workflows.ensure(userId, workflowId);
    const nowIso = new Date(this.now()).toISOString();
    const original_context = {
      id: newId("emit_", this.randomBytes),
      ts: nowIso,
      workflow_id: workflowId,
      deployment_id: newId("d_", this.randomBytes),
      source_type: "API",
      verified: false,
      owner_id: userId,
      platform_version: version,
      ...ctxIn,
    };
    const payload = {
      original_event: body.original_event ?? null,
      original_context,
      error: { ts: nowIso, ...error },
    };
    const [id] = await this.recordFor(userId, workflowId, "workflow", [{ event: payload, name: "$errors", meta: {} }]);
    return id as string;
  }
}
