import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { WebSocket } from "undici";

/**
 * Headless Chromium driven over the DevTools protocol (CDP), for tests that look at a page as a
 * browser shows it: what it requested, what it logged, what text it rendered. Chromium comes from
 * Debian's `chromium` package (.ci/run installs it).
 */

/** The Chromium binary on PATH (or CHROMIUM_PATH), if any. */
export function findChromium(): string | undefined {
  if (process.env.CHROMIUM_PATH && existsSync(process.env.CHROMIUM_PATH)) return process.env.CHROMIUM_PATH;
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
      const p = path.join(dir, name);
      if (existsSync(p)) return p;
    }
  }
  return undefined;
}

type Params = Record<string, unknown>;

/** A page in a headless browser, with everything it requested and logged. */
export interface BrowserPage {
  /** URLs of every request the page made (documents, scripts, styles, images, fetches). */
  readonly requests: readonly string[];
  /** Console messages, log entries (CSP violations among them) and uncaught exceptions. */
  readonly messages: readonly string[];
  /** Evaluates an expression in the page and returns its value (a promise's, once it settles). */
  evaluate<T>(expression: string): Promise<T>;
  /** Navigates the same tab (same profile and cookies) to `url`; resolves once navigation was issued. */
  navigate(url: string): Promise<void>;
  close(): Promise<void>;
}

/** Starts Chromium and opens `url` in a fresh profile; resolves once navigation was issued. */
export async function openPage(binary: string, url: string): Promise<BrowserPage> {
  const profile = mkdtempSync(path.join(tmpdir(), "tributary-chromium-"));
  const child: ChildProcess = spawn(
    binary,
    [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-dev-shm-usage",
      "--remote-debugging-port=0",
      `--user-data-dir=${profile}`,
      "about:blank",
    ],
    // Its own process group, so the cleanup can kill the helper processes it starts too.
    { stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once("exit", () => resolve());
  });
  /** Kills the browser, waits (bounded) until it is gone, then removes its profile. */
  const cleanup = async () => {
    // The whole group: a renderer or utility process left alive keeps writing into the profile.
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 10_000)))]);
    clearTimeout(timer);
    // A temporary profile that cannot be removed yet is no failure of the page under test.
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    } catch {
      // left in the temporary directory
    }
  };
  let ws: WebSocket;
  try {
    const endpoint = await new Promise<string>((resolve, reject) => {
      let err = "";
      const timer = setTimeout(() => reject(new Error(`chromium printed no DevTools endpoint within 30 s: ${err.slice(-500)}`)), 30_000);
      child.stderr?.on("data", (chunk: Buffer) => {
        err += chunk.toString();
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m?.[1]) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`chromium exited (${code}): ${err.slice(-500)}`));
      });
    });
    ws = new WebSocket(endpoint);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(), { once: true });
      ws.addEventListener("error", () => reject(new Error("cannot connect to chromium's DevTools endpoint")), { once: true });
    });
  } catch (err) {
    await cleanup();
    throw err;
  }

  let nextId = 1;
  const pending = new Map<number, { resolve: (v: Params) => void; reject: (e: Error) => void }>();
  const requests: string[] = [];
  const messages: string[] = [];
  ws.addEventListener("message", (ev) => {
    const msg = JSON.parse(String(ev.data)) as {
      id?: number;
      result?: Params;
      error?: { message: string };
      method?: string;
      params?: Params;
    };
    if (msg.id !== undefined) {
      const p = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) p?.reject(new Error(msg.error.message));
      else p?.resolve(msg.result ?? {});
      return;
    }
    const params = msg.params ?? {};
    if (msg.method === "Network.requestWillBeSent") requests.push(String((params.request as Params).url));
    if (msg.method === "Log.entryAdded") messages.push(`log ${String((params.entry as Params).text)}`);
    if (msg.method === "Runtime.consoleAPICalled")
      messages.push(`console.${String(params.type)} ${JSON.stringify(params.args).slice(0, 300)}`);
    if (msg.method === "Runtime.exceptionThrown") messages.push(`exception ${JSON.stringify(params.exceptionDetails).slice(0, 300)}`);
  });
  const send = (method: string, params: Params = {}, sessionId?: string): Promise<Params> =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    });

  const { targetId } = (await send("Target.createTarget", { url: "about:blank" })) as { targetId: string };
  const { sessionId } = (await send("Target.attachToTarget", { targetId, flatten: true })) as { sessionId: string };
  for (const domain of ["Network", "Log", "Runtime", "Page"]) await send(`${domain}.enable`, {}, sessionId);
  await send("Page.navigate", { url }, sessionId);

  return {
    requests,
    messages,
    async evaluate<T>(expression: string): Promise<T> {
      const r = (await send("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true }, sessionId)) as {
        result: { value: T };
      };
      return r.result.value;
    },
    async navigate(to: string) {
      const r = (await send("Page.navigate", { url: to }, sessionId)) as { errorText?: string };
      if (r.errorText) throw new Error(`navigation to ${to} failed: ${r.errorText}`);
    },
    async close() {
      ws.close();
      await cleanup();
    },
  };
}
