import type { Registry } from "prom-client";

/** What the ops answers read: the metrics registry and the process's bounded readiness. */
export interface OpsSources {
  readonly registry: Registry;
  /** Readiness of the process, bounded (app/readiness.ts): never throws, answers within 1.5 s. */
  readonly ready: () => Promise<boolean>;
}

/** One ops answer, ready to send: JSON bodies are objects, /metrics is the exposition text. */
export interface OpsAnswer {
  readonly status: number;
  readonly contentType: string;
  readonly body: unknown;
}

/** The paths both listeners serve: the api role's app and the OPS_PORT listener. */
export const OPS_PATHS = ["/healthz", "/readyz", "/metrics"] as const;
export type OpsPath = (typeof OPS_PATHS)[number];

const JSON_TYPE = "application/json; charset=utf-8";

export function isOpsPath(path: string): path is OpsPath {
  return (OPS_PATHS as readonly string[]).includes(path);
}

/**
 * The answer to GET `path`, the same on the api listener and the ops listener (SPEC §10):
 * /healthz is liveness (the process answers), /readyz is 200 or 503, /metrics the Prometheus text.
 */
export async function opsAnswer(path: OpsPath, s: OpsSources): Promise<OpsAnswer> {
  switch (path) {
    case "/healthz":
      return { status: 200, contentType: JSON_TYPE, body: { status: "ok" } };
    case "/readyz": {
      const ok = await s.ready();
      return { status: ok ? 200 : 503, contentType: JSON_TYPE, body: ok ? { status: "ready" } : { error: "not ready", code: "not_ready" } };
    }
    case "/metrics":
      return { status: 200, contentType: s.registry.contentType, body: await s.registry.metrics() };
    default: {
      const never: never = path;
      throw new Error(`unknown ops path ${String(never)}`);
    }
  }
}
