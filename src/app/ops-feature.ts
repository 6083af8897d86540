import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { isOpsPath, type OpsSources, opsAnswer } from "../api/ops-answers.js";
import type { Core } from "./core.js";
import type { Shutdown } from "./shutdown.js";

/**
 * The ops listener (OPS_PORT): /healthz, /readyz and /metrics only, with the api role's answers.
 * Processes without the api role serve no other HTTP, so in a split deployment (Kubernetes:
 * worker and scheduler Deployments) this is what their probes and Prometheus reach. A plain
 * node:http server: three fixed routes need no router, body parsing or auth. The answers are the
 * api role's own (api/ops-answers.ts).
 */
export function createOpsFeature(core: Core, shutdown: Shutdown, ready: () => Promise<boolean>) {
  const { config, logger } = core;
  const deps: OpsSources = { registry: core.metrics.registry, ready };
  const server = createServer((req, res) => void handle(deps, req, res));
  return {
    /** Listens on HOST:`port`; resolves with the bound port (useful with OPS_PORT=0). */
    async start(port: number): Promise<number> {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, config.host, () => {
          server.off("error", reject);
          resolve();
        });
      });
      shutdown.on("http", "ops server", () => new Promise<void>((r) => server.close(() => r())));
      shutdown.on("workers", "ops connections", () => server.closeAllConnections());
      const bound = (server.address() as AddressInfo).port;
      logger.info({ port: bound, host: config.host, roles: config.roles }, "ops endpoints listening (/healthz, /readyz, /metrics)");
      return bound;
    },
    server: (): Server => server,
  };
}

async function handle(deps: OpsSources, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? "/").split("?")[0] ?? "/";
  if (!isOpsPath(path)) return json(res, 404, { error: `no route for ${req.method} ${path}`, code: "route_not_found" });
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("allow", "HEAD, GET");
    return json(res, 405, { error: `method ${req.method} is not allowed on ${path}; allowed: HEAD, GET`, code: "method_not_allowed" });
  }
  try {
    const answer = await opsAnswer(path, deps);
    res.writeHead(answer.status, { "content-type": answer.contentType });
    res.end(typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body));
  } catch {
    // Never an internal detail in the body (the api role's rule).
    return json(res, 500, { error: "internal server error", code: "internal_error" });
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return;
  res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
  res.end(JSON.stringify(body));
}
