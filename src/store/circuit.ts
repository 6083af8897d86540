import type { RedisClient } from "./context.js";
import {
  type Admission,
  type CircuitChange,
  type CircuitPolicy,
  type CircuitState,
  CLOSED,
  PROBE_HEAD_START_MS,
} from "../domain/circuit.js";
import type { Keys } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { CIRCUIT_ADMIT } from "./scripts/circuit-admit.js";
import { CIRCUIT_RECORD } from "./scripts/circuit-record.js";

/** What an attempt's result did to the circuit; `released`: the job ids of the deliveries that waited on it. */
export interface RecordResult {
  readonly change?: CircuitChange;
  readonly released: readonly string[];
}

/** An admission, and whether the circuit was clean (closed, without failures) when it was made. */
export interface AdmitResult {
  readonly admission: Admission;
  readonly clean: boolean;
}

const NOTHING: RecordResult = Object.freeze({ released: Object.freeze([]) });
const SEND: Admission = Object.freeze({ kind: "send" });
const SEND_CLEAN: AdmitResult = Object.freeze({ admission: SEND, clean: true });
const SEND_DIRTY: AdmitResult = Object.freeze({ admission: SEND, clean: false });
/** The message on `keys.circuitChanges()`: a webhook whose circuit stopped being clean. */
export function circuitChangeMessage(userId: string, webhookId: string): string {
  return `${userId} ${webhookId}`;
}

/**
 * A delivery whose wait on the circuit ends within this of its closing is not released: its job
 * comes due by itself (its delay also carries up to a second of spread), at no cost. So are those
 * that waited for the probe's head start when the probe closes it.
 */
const RELEASE_SOONER_THAN_MS = PROBE_HEAD_START_MS;

/** Open-circuit index members examined per gauge sample (the index is small: open circuits only). */
const OPEN_SAMPLE = 1000;

/**
 * Webhook circuit breakers in Redis (domain/circuit.ts's rules, applied atomically by
 * store/scripts/circuit-admit.ts and circuit-record.ts), shared by every worker process. Besides
 * each webhook's state, a global index of open circuits feeds the `tributary_circuits_open` gauge;
 * it is written after the transition (another hash tag), so a process dying in between leaves it
 * one transition behind, and `countOpen` drops members whose circuit is gone.
 */
export class CircuitStore {
  private readonly admitScript: ScriptCall;
  private readonly recordScript: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
    private readonly policy: CircuitPolicy,
    private readonly now: () => number = Date.now,
  ) {
    this.admitScript = defineScript(redis, CIRCUIT_ADMIT);
    this.recordScript = defineScript(redis, CIRCUIT_RECORD);
  }

  /**
   * Admits an attempt (`token`: its delivery id). When it must wait, `jobId` (the BullMQ job that
   * will carry it) is parked with the webhook's waiting deliveries, released when the circuit closes.
   */
  async admit(userId: string, webhookId: string, token: string, jobId: string, leaseMs: number): Promise<AdmitResult> {
    const res = (await this.admitScript(
      [this.keys.webhookCircuit(userId, webhookId), this.keys.webhookCircuitWaiting(userId, webhookId)],
      [this.now(), leaseMs, token, jobId, PROBE_HEAD_START_MS],
    )) as number[];
    const [kind, at] = res;
    if (kind === 1) return { admission: { kind: "probe", leaseUntilMs: Number(at) }, clean: false };
    if (kind === 2) return { admission: { kind: "wait", untilMs: Number(at) }, clean: false };
    if (kind === 3) return { admission: { kind: "wait", untilMs: Number(at), prober: true }, clean: false };
    return Number(at) === 0 ? SEND_CLEAN : SEND_DIRTY;
  }

  /**
   * Applies an attempt's success or failure; on closing, takes the job ids of the waiting
   * deliveries whose wait would still last (RELEASE_SOONER_THAN_MS).
   */
  async record(userId: string, webhookId: string, success: boolean, token: string): Promise<RecordResult> {
    const { threshold, cooldownMs, maxCooldownMs } = this.policy;
    const res = (await this.recordScript(
      [this.keys.webhookCircuit(userId, webhookId), this.keys.webhookCircuitWaiting(userId, webhookId)],
      [
        success ? "s" : "f",
        token,
        this.now(),
        threshold,
        cooldownMs,
        maxCooldownMs,
        this.keys.circuitChanges(),
        circuitChangeMessage(userId, webhookId),
        RELEASE_SOONER_THAN_MS,
      ],
    )) as [number, string[]?];
    const member = `${userId} ${webhookId}`;
    switch (res[0]) {
      case 1:
        await this.redis.zadd(this.keys.openCircuits(), this.now(), member);
        return { change: "opened", released: [] };
      case 2:
        return { change: "reopened", released: [] };
      case 3:
        await this.redis.zrem(this.keys.openCircuits(), member);
        return { change: "closed", released: res[1] ?? [] };
      default:
        return NOTHING;
    }
  }

  /** The circuit as stored (closed, without failures, when there is none). */
  async read(userId: string, webhookId: string): Promise<CircuitState> {
    const h = await this.redis.hgetall(this.keys.webhookCircuit(userId, webhookId));
    if (h.k === undefined && h.f === undefined) return CLOSED;
    const num = (v: string | undefined) => (v === undefined || v === "" ? null : Number(v));
    return {
      failures: Number(h.f ?? 0),
      openings: Number(h.k ?? 0),
      openedAtMs: num(h.o),
      nextProbeAtMs: num(h.n),
      probeUntilMs: num(h.p),
      probeToken: h.pt ?? null,
      proberForMs: num(h.c),
    };
  }

  /**
   * Forgets a deleted webhook's circuit and takes the job ids of the deliveries that waited on it
   * (the caller releases them: they find the webhook gone and end).
   */
  async discard(userId: string, webhookId: string): Promise<string[]> {
    const waiting = this.keys.webhookCircuitWaiting(userId, webhookId);
    const res = await this.redis.multi().zrange(waiting, 0, -1).del(waiting, this.keys.webhookCircuit(userId, webhookId)).exec();
    await this.redis.zrem(this.keys.openCircuits(), `${userId} ${webhookId}`);
    const ids = res?.[0]?.[1];
    return Array.isArray(ids) ? ids.map(String) : [];
  }

  /** Webhooks whose circuit is open (or half open), across every process; members whose circuit is gone are dropped. */
  async countOpen(): Promise<number> {
    const index = this.keys.openCircuits();
    const members = await this.redis.zrange(index, 0, OPEN_SAMPLE - 1);
    if (members.length === 0) return 0;
    // One command per circuit, not a pipeline: the circuits sit in several users' slots, which a
    // Cluster client refuses in one pipeline; separate commands are routed one by one (and still
    // share socket writes).
    const openings = await Promise.all(
      members.map((m) => {
        const [userId = "", webhookId = ""] = m.split(" ");
        return this.redis.hget(this.keys.webhookCircuit(userId, webhookId), "k");
      }),
    );
    const gone = members.filter((_, i) => !(Number(openings[i] ?? 0) > 0));
    if (gone.length > 0) await this.redis.zrem(index, ...gone);
    const total = await this.redis.zcard(index);
    return total;
  }
}
