import { request } from "undici";

/** SPEC §11: `/readyz` must answer 200 within this, or the process counts as unhealthy. */
export const HEALTHCHECK_TIMEOUT_MS = 2000;

export type HealthVerdict = { readonly ok: true } | { readonly ok: false; readonly reason: string };

/**
 * The URL `tributary healthcheck` probes when given none: the daemon's own listener as its
 * configuration (HOST, PORT) describes it. A wildcard HOST is reached through loopback.
 */
export function defaultHealthUrl(host: string, port: number): string {
  const wildcard = host === "0.0.0.0" || host === "::" || host === "[::]";
  const target = wildcard ? "127.0.0.1" : host;
  const bracketed = target.includes(":") && !target.startsWith("[") ? `[${target}]` : target;
  return `http://${bracketed}:${port}`;
}

/**
 * GET `<base>/readyz`: healthy only on a 200 within `timeoutMs` (connecting, headers and body
 * together). Never throws; an unhealthy verdict carries one line saying what was wrong.
 */
export async function checkReadiness(base: string, timeoutMs = HEALTHCHECK_TIMEOUT_MS): Promise<HealthVerdict> {
  let url: URL;
  try {
    url = new URL("readyz", base.endsWith("/") ? base : `${base}/`);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    return { ok: false, reason: `invalid URL ${JSON.stringify(base)} (expected http(s)://host:port)` };
  }
  try {
    const res = await request(url, { method: "GET", signal: AbortSignal.timeout(timeoutMs) });
    // Drain the body so the 2 s bound covers the whole answer and the socket is released.
    await res.body.dump();
    if (res.statusCode === 200) return { ok: true };
    return { ok: false, reason: `${url.href} answered ${res.statusCode}${res.statusCode === 503 ? " (not ready)" : ""}` };
  } catch (err) {
    return { ok: false, reason: `${url.href}: ${describe(err, timeoutMs)}` };
  }
}

function describe(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; code?: string; message?: string };
  if (e?.name === "TimeoutError" || e?.name === "AbortError") return `no answer within ${timeoutMs} ms`;
  if (e?.code === "ECONNREFUSED") return "connection refused (is the daemon listening there?)";
  if (e?.code === "ENOTFOUND" || e?.code === "EAI_AGAIN") return `host not found (${e.code})`;
  return String(e?.message ?? err).split("\n")[0] ?? "request failed";
}
