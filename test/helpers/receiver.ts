import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * A loopback webhook receiver for integration tests: a real `node:http` server on 127.0.0.1 that
 * records every request (raw body, headers, arrival time) and answers through a function the
 * test supplies. Nothing is mocked: the daemon's sender talks to it over TCP.
 */

/** One request as the receiver saw it. */
export interface ReceivedRequest {
  readonly method: string;
  /** Path and query as sent (`req.url`). */
  readonly path: string;
  /** Lower-case header names, as node:http gives them. */
  readonly headers: IncomingHttpHeaders;
  /** The body exactly as received (UTF-8), for signature checks. */
  readonly raw: string;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: unknown;
  /** `Date.now()` when the whole body had arrived. */
  readonly at: number;
  /** 1-based position of this request among those to the same path. */
  readonly nthOnPath: number;
}

/** How to answer: a status (default 200), headers and a body; or "hang" to never answer. */
export type Answer = { status?: number; headers?: Record<string, string>; body?: string } | "hang";

export type AnswerFn = (req: ReceivedRequest) => Answer | Promise<Answer>;

import { type WaitOptions, waitFor } from "./wait.js";

export { type WaitOptions, waitFor };

export interface Receiver {
  readonly port: number;
  /** Absolute URL of a path on this receiver (default `/hook`). */
  url(path?: string): string;
  /** Every request so far, in arrival order. */
  readonly requests: readonly ReceivedRequest[];
  /** The requests to one path (query string ignored). */
  to(path: string): ReceivedRequest[];
  /** Polls `predicate` against the receiver until it holds (see `waitFor`). */
  waitFor<T>(predicate: (rx: Receiver) => T, opts?: WaitOptions): Promise<Exclude<T, undefined | null | false>>;
  /** Replaces the answer function. */
  answer(fn: AnswerFn): void;
  /** Closes the server and destroys every connection, hanging ones included. Idempotent. */
  close(): Promise<void>;
}

const pathOf = (url: string): string => url.split("?")[0] ?? url;

export async function startReceiver(answer: AnswerFn = () => ({ status: 200 })): Promise<Receiver> {
  let respond = answer;
  const requests: ReceivedRequest[] = [];
  const perPath = new Map<string, number>();
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      let json: unknown;
      try {
        json = raw ? JSON.parse(raw) : undefined;
      } catch {
        json = undefined;
      }
      const path = pathOf(req.url ?? "/");
      const nthOnPath = (perPath.get(path) ?? 0) + 1;
      perPath.set(path, nthOnPath);
      const got: ReceivedRequest = {
        method: req.method ?? "",
        path: req.url ?? "/",
        headers: req.headers,
        raw,
        json,
        at: Date.now(),
        nthOnPath,
      };
      requests.push(got);
      void reply(res, got);
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });

  async function reply(res: ServerResponse, got: ReceivedRequest): Promise<void> {
    let a: Answer;
    try {
      a = await respond(got);
    } catch {
      a = { status: 500, body: "receiver answer function threw" };
    }
    if (a === "hang" || res.destroyed) return;
    res.writeHead(a.status ?? 200, a.headers ?? {});
    res.end(a.body ?? "");
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;

  const rx: Receiver = {
    port,
    url: (path = "/hook") => `http://127.0.0.1:${port}${path}`,
    requests,
    to: (path) => requests.filter((r) => pathOf(r.path) === path),
    waitFor: (predicate, opts) => waitFor(() => predicate(rx), opts),
    answer(fn) {
      respond = fn;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
      return closing;
    },
  };
  return rx;
}
