import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";

/**
 * A source run the sandbox fails (here: its sandbox process is killed under the run) is counted as
 * `tributary_source_runs_total{outcome="sandbox_error"}`, apart from the component's own errors:
 * that series is what the TributarySandboxErrors alert reads (deploy/prometheus/alerts.yml).
 */

/** Signals the receiver that the run started, then stays busy well within its time limit. */
const BUSY = `module.exports = {
  name: "busy",
  props: { http: "$.interface.http", startedUrl: { type: "string", label: "Where the run reports its start" } },
  async run(e) {
    await fetch(this.startedUrl + "?n=" + e.body.n);
    const end = Date.now() + 40000;
    while (Date.now() < end) {}
  },
};`;
const THROWS = `module.exports = { name: "throws", props: { http: "$.interface.http" }, async run() { throw new Error("the component's own bug"); } };`;

let td: TestDaemon;
let rx: Receiver;

beforeAll(async () => {
  rx = await startReceiver();
  td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "60000" });
});

afterAll(async () => {
  await td?.close();
  await rx?.close();
});

/** Sandbox processes are this test process's children running sandbox-host. */
function sandboxProcesses(): number[] {
  return execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(process.pid)], { encoding: "utf8" })
    .split("\n")
    .filter((l) => l.includes("sandbox-host"))
    .map((l) => Number.parseInt(l.trim(), 10));
}

async function runsCounted(outcome: string): Promise<number> {
  const text = await (await fetch(`${td.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("tributary_source_runs_total{") && l.includes(`outcome="${outcome}"`));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

describe("source runs the sandbox fails", () => {
  it("count as sandbox_error; a component that throws counts as error", async () => {
    const { api } = await td.createUser("paid");
    const thrower = await api.post("/v1/sources", { json: { component_code: THROWS } });
    expect(thrower.status, thrower.text).toBe(200);
    await fetch(thrower.body.data.configured_props.http.endpoint_url, { method: "POST", body: "{}" });
    await waitFor(async () => (await runsCounted("error")) >= 1, { timeoutMs: 20_000, what: "the throwing run counted as error" });
    expect(await runsCounted("sandbox_error")).toBe(0);

    const busy = await api.post("/v1/sources", { json: { component_code: BUSY, configured_props: { startedUrl: rx.url("/started") } } });
    expect(busy.status, busy.text).toBe(200);
    await fetch(busy.body.data.configured_props.http.endpoint_url, { method: "POST", body: JSON.stringify({ n: 1 }) });
    await rx.waitFor((r) => r.to("/started").length > 0, { timeoutMs: 20_000, what: "the busy run's start" });
    // The run is in its busy loop: end every sandbox process under it.
    const pids = sandboxProcesses();
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) process.kill(pid, "SIGKILL");
    await waitFor(async () => (await runsCounted("sandbox_error")) >= 1, {
      timeoutMs: 20_000,
      what: "the killed run counted as sandbox_error",
    });
    expect(await runsCounted("error")).toBe(1);
  });
});
