import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";

/**
 * The webhook destination: a plain node:http server on loopback that answers 200 at once,
 * counts requests and records the arrival time of each `seq` found in the body.
 */
export interface Receiver {
  readonly url: string;
  /** Requests since the last reset. */
  readonly count: () => number;
  /** Requests that repeated a seq already seen since the last reset. */
  readonly duplicates: () => number;
  /** performance.now() of the first and last request since the last reset. */
  readonly window: () => { first: number; last: number } | undefined;
  /** seq -> performance.now() at arrival (first arrival only). */
  readonly arrivals: Map<number, number>;
  reset(): void;
  /**
   * A receiver that is down answers every request 503 at once and counts nothing (the recovery
   * phase: a destination down for a while, then back).
   */
  setDown(down: boolean): void;
  /** Resolves true once `count() >= n`, false at the deadline. */
  waitFor(n: number, timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

const SEQ = /"seq":(\d+)/;

export async function startReceiver(): Promise<Receiver> {
  let count = 0;
  let down = false;
  let dups = 0;
  let first = 0;
  let last = 0;
  const arrivals = new Map<number, number>();
  const waiters = new Set<{ n: number; resolve: (ok: boolean) => void }>();

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => {
      body += c;
    });
    req.on("end", () => {
      if (down) {
        res.writeHead(503, { "content-length": "0" });
        res.end();
        return;
      }
      const now = performance.now();
      res.writeHead(200, { "content-length": "0" });
      res.end();
      if (count === 0) first = now;
      last = now;
      count++;
      const m = SEQ.exec(body);
      if (m) {
        const seq = Number(m[1]);
        if (arrivals.has(seq)) dups++;
        else arrivals.set(seq, now);
      }
      for (const w of waiters) {
        if (count >= w.n) {
          waiters.delete(w);
          w.resolve(true);
        }
      }
    });
  });
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  let closing: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    count: () => count,
    duplicates: () => dups,
    window: () => (count > 0 ? { first, last } : undefined),
    arrivals,
    reset() {
      count = 0;
      dups = 0;
      first = 0;
      last = 0;
      arrivals.clear();
    },
    setDown(d) {
      down = d;
    },
    waitFor(n, timeoutMs) {
      if (count >= n) return Promise.resolve(true);
      return new Promise((resolve) => {
        const w = {
          n,
          resolve: (ok: boolean) => {
            clearTimeout(timer);
            resolve(ok);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(w);
          resolve(false);
        }, timeoutMs);
        waiters.add(w);
      });
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const w of waiters) w.resolve(false);
        waiters.clear();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
