import { emitterGlob } from "../domain/ids.js";
import type { Keys } from "./keys.js";
import type { RecordTarget } from "./record-groups.js";

/**
 * The key a record requires to exist (a workflow's record), named from the record's user and
 * emitter. Callers pass one function per kind of guard: a target is kept for the function, and the
 * key is built only when the target is.
 */
export type GuardKeyOf = (userId: string, emitterId: string) => string;

/** The ingress bucket a record charges (store/events.ts `IngressCharge`), as far as its target depends on it. */
export interface TargetBucket {
  readonly key: string;
  readonly perSecond: number;
  readonly burst: number;
}

/** A target and what it was built from besides its user, emitter and channel. */
interface Entry {
  readonly target: RecordTarget;
  readonly kind: string;
  readonly guard: GuardKeyOf | undefined;
  readonly bucketKey: string | undefined;
  readonly perSecond: number;
  readonly burst: number;
}

/** What one user's event streams may hold; 0 = no limit. */
export interface StorageLimits {
  /** Streams (one per emitter and channel). */
  readonly streams: number;
  /** Bytes of the events' summary records. */
  readonly storedBytes: number;
}

const NO_STORAGE_LIMITS: StorageLimits = { streams: 0, storedBytes: 0 };

/** Targets kept before the cache starts over: far more emitter channels than one process records to at once. */
export const MAX_RECORD_TARGETS = 10_000;

function builtFrom(e: Entry, kind: string, guard: GuardKeyOf | undefined, bucket: TargetBucket | undefined): boolean {
  if (e.kind !== kind || e.guard !== guard) return false;
  if (bucket === undefined) return e.bucketKey === undefined;
  return e.bucketKey === bucket.key && e.perSecond === bucket.perSecond && e.burst === bucket.burst;
}

/**
 * The record script's keys and shared arguments (store/scripts/record-events.ts) of each user,
 * emitter and channel, built once and then handed out as the same object. An emit used to build
 * seven key strings and two arrays, and the group commit (store/record-groups.ts) then hashed the
 * first and compared all seven with its open group's, flattening each: about 1.3 µs of an emit
 * (perf, docs/performance.md). With one object per target, the group's lookup hits a hashed string
 * and its comparison an identical object. An entry is rebuilt when the request's kind, guard function or
 * bucket differ from those it was built from; past `max` entries the cache starts over. The keys
 * a request brings are compared, not trusted: the bucket's key (store/keys.ts keeps one string per
 * user, so this is instant) and the guard function (one per kind of guard).
 */
export class RecordTargets {
  private readonly byUser = new Map<string, Map<string, Map<string, Entry>>>();
  private size = 0;

  constructor(
    private readonly keys: Keys,
    /** What a user's streams may hold (MAX_STREAMS_PER_USER, MAX_STORED_MB_PER_USER in bytes); 0 = no limit. */
    private readonly storage: StorageLimits = NO_STORAGE_LIMITS,
    private readonly max = MAX_RECORD_TARGETS,
  ) {}

  /**
   * The target of `userId`'s `emitterId` on `channel` (the stored form: "" is the default channel),
   * guarded by the key `guard` names (none: unguarded) and charging `bucket` (none: nothing charged).
   */
  get(
    userId: string,
    emitterId: string,
    channel: string,
    kind: string,
    guard: GuardKeyOf | undefined,
    bucket: TargetBucket | undefined,
  ): RecordTarget {
    let byEmitter = this.byUser.get(userId);
    let byChannel = byEmitter?.get(emitterId);
    const entry = byChannel?.get(channel);
    if (entry !== undefined && builtFrom(entry, kind, guard, bucket)) return entry.target;
    if (this.size >= this.max) {
      this.byUser.clear();
      this.size = 0;
      byEmitter = undefined;
      byChannel = undefined;
    }
    if (byEmitter === undefined) {
      byEmitter = new Map();
      this.byUser.set(userId, byEmitter);
    }
    if (byChannel === undefined) {
      byChannel = new Map();
      byEmitter.set(emitterId, byChannel);
    }
    if (!byChannel.has(channel)) this.size++;
    const target = this.build(userId, emitterId, channel, kind, guard?.(userId, emitterId), bucket);
    byChannel.set(channel, {
      target,
      kind,
      guard,
      bucketKey: bucket?.key,
      perSecond: bucket?.perSecond ?? 0,
      burst: bucket?.burst ?? 0,
    });
    return target;
  }

  /** Targets held. */
  get count(): number {
    return this.size;
  }

  private build(
    userId: string,
    emitterId: string,
    channel: string,
    kind: string,
    guardKey: string | undefined,
    bucket: TargetBucket | undefined,
  ): RecordTarget {
    const summaryKey = this.keys.events(userId, emitterId, channel);
    // The script checks KEYS[6] only when it differs from KEYS[1] (a guard is never a summary stream).
    if (guardKey === summaryKey) throw new Error("record target: the guard key cannot be the summary stream");
    const exactIndex = this.keys.subscriptionIndex(userId, emitterId, channel);
    const glob = emitterGlob(emitterId);
    return {
      keys: [
        summaryKey,
        this.keys.outboxOf(userId),
        this.keys.eventChannels(userId, emitterId),
        exactIndex,
        glob ? this.keys.subscriptionIndex(userId, glob, channel) : exactIndex,
        guardKey ?? summaryKey,
        bucket?.key ?? summaryKey,
        this.keys.storedStreams(userId),
      ],
      shared: [
        userId,
        emitterId,
        channel,
        kind,
        bucket === undefined ? "0" : String(bucket.perSecond),
        bucket === undefined ? "0" : String(bucket.burst),
        String(this.storage.streams),
        String(this.storage.storedBytes),
      ],
    };
  }
}
