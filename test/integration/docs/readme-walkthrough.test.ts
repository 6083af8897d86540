import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../../src/redis/embedded.js";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/wait.js";

/**
 * The README's walkthrough, run as written: its ```sh walkthrough blocks are pasted, in order, into
 * one bash (with `set -euo pipefail`, so a step that fails stops it), against a daemon started with
 * the settings of its ```sh walkthrough-daemon block. Only the addresses change: the daemon's
 * `localhost:3000` and the receiver's port 4000 become ports picked at run time. The receiver the
 * README starts must print signed, verified deliveries of the matching event, the timer's tick and
 * the event after the secret's rotation, and never the event its filter keeps back.
 */

const README = readFileSync(path.resolve(import.meta.dirname, "../../../README.md"), "utf8");

/** The fenced blocks whose info string is `sh <tag>`, without the list's indentation. */
function blocks(tag: string): string[] {
  const fence = new RegExp(`^( *)\`\`\`sh ${tag}\\n([\\s\\S]*?)^\\1\`\`\`$`, "gm");
  return [...README.matchAll(fence)].map(([, indent = "", body = ""]) =>
    body
      .split("\n")
      .map((line) => (line.startsWith(indent) ? line.slice(indent.length) : line))
      .join("\n"),
  );
}

/** `NAME=value` words before `npm start` in the daemon block. */
function daemonSettings(): Record<string, string> {
  const [block] = blocks("walkthrough-daemon");
  const line = block?.split("\n").find((l) => l.includes("npm start"));
  if (!line) throw new Error("README: no ```sh walkthrough-daemon block with `npm start`");
  const words = line.slice(0, line.indexOf("npm start")).trim().split(/\s+/).filter(Boolean);
  return Object.fromEntries(words.map((w) => [w.slice(0, w.indexOf("=")), w.slice(w.indexOf("=") + 1)]));
}

interface Run {
  readonly child: ChildProcess;
  output: string;
  exit?: number | null;
}

describe("the README walkthrough", () => {
  let daemon: TestDaemon;
  let run: Run;
  const dir = mkdtempSync(path.join(tmpdir(), "tributary-readme-"));

  beforeAll(async () => {
    const settings = daemonSettings();
    expect(settings).toMatchObject({ ADMIN_TOKEN: expect.any(String), ALLOW_PRIVATE_DESTINATIONS: "true" });
    daemon = await startTestDaemon(settings);
    const receiverPort = await freePort();
    const steps = blocks("walkthrough");
    expect(steps.length).toBeGreaterThanOrEqual(8);
    const script = ["set -euo pipefail", ...steps]
      .join("\n")
      .replaceAll("localhost:3000", daemon.url.replace(/^http:\/\//, ""))
      .replace(/\b4000\b/g, String(receiverPort));
    // Its own process group, so that the receiver the script leaves running is stopped with it.
    const child = spawn("bash", ["-c", script], { cwd: dir, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    run = { child, output: "" };
    child.stdout?.on("data", (c: Buffer) => (run.output += c.toString()));
    child.stderr?.on("data", (c: Buffer) => (run.output += c.toString()));
    child.on("exit", (code) => (run.exit = code));
  }, 60_000);

  afterAll(async () => {
    if (run?.child.pid) {
      try {
        process.kill(-run.child.pid, "SIGTERM");
      } catch {
        // The group has already ended.
      }
    }
    await daemon?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The receiver's lines: `<verdict> <channel> <webhook-id> <body>`. */
  const received = () => run.output.split("\n").filter((l) => /^(verified|NOT VERIFIED) /.test(l));

  it("runs every step without an error", async () => {
    await waitFor(() => run.exit !== undefined, { timeoutMs: 90_000, intervalMs: 100, what: "the walkthrough's bash to end" });
    expect(run.exit, run.output).toBe(0);
  }, 100_000);

  it("delivers the matching event, the timer's tick and the event after the rotation, signed", async () => {
    const wanted = [/"order":42/, /"interval_seconds":15/, /"order":43/];
    await waitFor(() => wanted.every((w) => received().some((l) => w.test(l))), {
      timeoutMs: 60_000,
      intervalMs: 100,
      what: `the receiver's verified deliveries (output so far:\n${run.output})`,
    });
    for (const w of wanted) expect(received().find((l) => w.test(l)) ?? "", run.output).toMatch(/^verified default d_\S+ \{/);
    expect(
      received().filter((l) => l.startsWith("NOT VERIFIED")),
      run.output,
    ).toEqual([]);
  }, 70_000);

  it("keeps the event its filter refuses from the receiver", async () => {
    const metrics = async () => (await fetch(`${daemon.url}/metrics`)).text();
    await waitFor(async () => /tributary_deliveries_total\{listener_kind="webhook",outcome="filtered"\} [1-9]/.test(await metrics()), {
      timeoutMs: 30_000,
      what: "the filtered event to be counted",
    });
    expect(
      received().filter((l) => l.includes('"order":7')),
      run.output,
    ).toEqual([]);
  }, 40_000);
});
