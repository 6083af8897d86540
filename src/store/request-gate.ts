import type { RedisClient } from "./context.js";
import { defineScript, type ScriptCall } from "./script.js";
import { SOURCE_REQUEST_ADMIT } from "./scripts/source-request-admit.js";

/**
 * What an HTTP source request must pass (store/scripts/source-request-admit.ts): the source's
 * token bucket, the user's ingress bucket (an unlimited ingress: `charge` undefined) and, for a
 * free user, the day's quota. Each part's numbers come from its owner (store/rate-limit.ts,
 * runtime/quotas.ts, services/ingress-rate.ts).
 */
export interface RequestGate {
  readonly rate: { readonly key: string; readonly perSecond: number; readonly burst: number };
  readonly charge?: { readonly key: string; readonly perSecond: number; readonly burst: number; readonly cost: number };
  readonly quota?: { readonly usageKey: string; readonly invocations: number; readonly computeMs: number };
}

/** A gate's verdict: each wait in ms (0: paid) and the quota reached (0: none); all 0 when let through. */
export interface GateVerdict {
  readonly rateWait: number;
  readonly chargeWait: number;
  readonly quota: 0 | 1 | 2;
}

/** The gate as `admit_request`'s KEYS[1..3] and ARGV[1..8] (store/scripts/source-request-admit.ts), at `now`. */
export function gateKeysAndArgs(gate: RequestGate, now: number): { keys: string[]; args: (string | number)[] } {
  const { rate, charge, quota } = gate;
  return {
    keys: [rate.key, charge?.key ?? rate.key, quota?.usageKey ?? rate.key],
    args: [
      rate.perSecond,
      rate.burst,
      now,
      charge ? charge.perSecond : "",
      charge?.burst ?? 0,
      charge?.cost ?? 0,
      quota ? quota.invocations : "",
      quota?.computeMs ?? 0,
    ],
  };
}

/** Reads `admit_request`'s three numbers. */
export function gateVerdict(reply: readonly unknown[]): GateVerdict {
  const over = Number(reply[2]);
  return { rateWait: Number(reply[0]), chargeWait: Number(reply[1]), quota: over === 1 || over === 2 ? over : 0 };
}

/** An HTTP source request's rates and quota in one step and one round trip (a request its run answers: nothing is queued). */
export class RequestGates {
  private readonly admitScript: ScriptCall;

  constructor(
    redis: RedisClient,
    private readonly now: () => number = Date.now,
  ) {
    this.admitScript = defineScript(redis, SOURCE_REQUEST_ADMIT);
  }

  async admit(gate: RequestGate): Promise<GateVerdict> {
    const { keys, args } = gateKeysAndArgs(gate, this.now());
    return gateVerdict((await this.admitScript(keys, args)) as unknown[]);
  }
}
