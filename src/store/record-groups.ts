import type { ScriptCall } from "./script.js";

/** A request the user's storage limits refused (store/scripts/record-events.ts), with what the user holds. */
export type StorageRefusal =
  | { readonly limit: "streams"; readonly streams: number; readonly max: number }
  | { readonly limit: "stored_bytes"; readonly bytes: number; readonly adding: number; readonly max: number };

/** What a charged record answers: the event ids, the wait until the bucket could pay, or a storage limit's refusal. */
export type ChargedRecord = { readonly ids: string[] } | { readonly waitMs: number } | { readonly refused: StorageRefusal };

/** A request's outcome: null when the guard key is missing (nothing written). */
export type RecordOutcome = ChargedRecord | null;

/**
 * What one group of requests shares: every key of the record script, and its first eight arguments.
 * Requests join one call when their keys and shared arguments are the same.
 */
export interface RecordTarget {
  readonly keys: readonly string[];
  /** ARGV[1..8] of store/scripts/record-events.ts: user, emitter, channel, kind, the bucket's rate and burst, the storage limits. */
  readonly shared: readonly string[];
}

/** One request: its four header arguments and its (summary, payload) pairs, ARGV of the record script. */
export interface RecordRequest {
  readonly acceptedAtMs: number;
  readonly hops: number;
  readonly cost: number;
  /** Summary record JSON and payload JSON of each event, in turn. */
  readonly pairs: readonly string[];
}

/** Limits of one call: a group this large is sent as it is and the next request starts another. */
export interface RecordGroupLimits {
  /** Events of one call (a batch emit holds up to 100). */
  readonly events: number;
  /** Characters of the events' JSON in one call. */
  readonly chars: number;
}

export const DEFAULT_RECORD_GROUP_LIMITS: RecordGroupLimits = { events: 100, chars: 1_000_000 };

interface Group {
  readonly target: RecordTarget;
  readonly args: string[];
  /** Settles with the call's reply: one per request, in order, or null (the guard key is missing). */
  readonly replies: Promise<unknown>;
  settle: (call: Promise<unknown>) => void;
  requests: number;
  events: number;
  chars: number;
}

/** The same keys and shared arguments (store/record-targets.ts hands out one object per target). */
function sameTarget(a: RecordTarget, b: RecordTarget): boolean {
  if (a === b) return true;
  for (let i = 0; i < a.keys.length; i++) if (a.keys[i] !== b.keys[i]) return false;
  for (let i = 0; i < a.shared.length; i++) if (a.shared[i] !== b.shared[i]) return false;
  return true;
}

/** The record script's status for a refused request: `streams <held> <max>` or `stored_bytes <held> <adding> <max>`. */
function storageRefusal(status: string): StorageRefusal {
  const [limit, a, b, c] = status.split(" ");
  if (limit === "streams") return { limit, streams: Number(a), max: Number(b) };
  if (limit === "stored_bytes") return { limit, bytes: Number(a), adding: Number(b), max: Number(c) };
  throw new Error(`the record script answered an unknown status: ${status}`);
}

/** Request `i`'s outcome in a call's reply. */
function outcome(replies: unknown, i: number): RecordOutcome {
  if (replies === null) return null;
  const reply = Array.isArray(replies) ? (replies[i] as unknown) : undefined;
  if (typeof reply === "number") return { waitMs: reply };
  if (Array.isArray(reply)) return { ids: reply as string[] };
  if (typeof reply === "string") return { refused: storageRefusal(reply) };
  throw new Error(`the record script answered no reply for request ${i}`);
}

/**
 * Group commit of the record step: the requests of one event-loop turn that write the same stream
 * (same user, emitter, channel, guard and bucket) go to Redis as one call of the record script,
 * sent when the turn's I/O is done (`setImmediate`), the calls of the turn in one socket write.
 * Each request keeps its own outcome (ids, a refused charge, the guard's verdict, or the call's
 * error) and nobody is answered before the call that recorded its events returned, so an
 * acknowledgement still means durable. Under load, the emits that arrive on several connections at
 * once share one command, one reply and one script run (docs/decisions.md "Group commit of the
 * record step"). Alone, a request is a call of its own, sent in the same turn.
 *
 * Requests of one stream keep their order: groups are sent in the order they were opened, on one
 * connection, and a group only grows at its end.
 */
export class RecordGroups {
  /** Groups still taking requests, by summary stream (KEYS[1]); a new map every turn. */
  private open = new Map<string, Group>();
  /** Every group of this turn, in the order they were opened. */
  private pending: Group[] = [];
  /** Requests taken and script calls sent so far (their ratio is the mean group size). */
  readonly counts = { requests: 0, calls: 0 };

  constructor(
    private readonly call: ScriptCall,
    /** Sends the calls of a flush in one write (store/script.ts `writeTogether`). */
    private readonly together: (send: () => void) => void,
    private readonly limits: RecordGroupLimits = DEFAULT_RECORD_GROUP_LIMITS,
  ) {}

  /** Records one request with the others of this turn to the same target; resolves with its own outcome. */
  add(target: RecordTarget, request: RecordRequest): Promise<RecordOutcome> {
    const events = request.pairs.length / 2;
    let chars = 0;
    for (const p of request.pairs) chars += p.length;
    const stream = target.keys[0] as string;
    let group = this.open.get(stream);
    if (
      group === undefined ||
      group.events + events > this.limits.events ||
      group.chars + chars > this.limits.chars ||
      !sameTarget(group.target, target)
    ) {
      if (this.pending.length === 0) setImmediate(this.flush);
      let settle: (call: Promise<unknown>) => void = () => undefined;
      const replies = new Promise<unknown>((resolve) => {
        settle = resolve;
      });
      group = { target, args: [...target.shared], replies, settle, requests: 0, events: 0, chars: 0 };
      this.open.set(stream, group);
      this.pending.push(group);
    }
    const index = group.requests++;
    this.counts.requests++;
    group.events += events;
    group.chars += chars;
    group.args.push(String(request.acceptedAtMs), String(request.hops), String(request.cost), String(events));
    for (const p of request.pairs) group.args.push(p);
    return group.replies.then((replies) => outcome(replies, index));
  }

  private readonly flush = (): void => {
    const groups = this.pending;
    this.pending = [];
    // A new map, not `clear()`: V8 keeps a cleared map's old table (for live iterators) with its
    // entries in place; once that table is old, the dead table holds this turn's groups (young) and
    // every scavenge promoted them with all they reference: about 270 KB per scavenge against 50–80
    // (docs/decisions.md "Group commit of the record step").
    this.open = new Map();
    this.together(() => {
      for (const g of groups) {
        this.counts.calls++;
        try {
          g.settle(this.call(g.target.keys, g.args));
        } catch (err) {
          g.settle(Promise.reject(err));
        }
      }
    });
  };
}
