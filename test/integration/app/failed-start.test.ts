import { execFileSync } from "node:child_process";
import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { startTestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";

/**
 * A start that fails closes what it opened (app/shutdown.ts): Redis connections, BullMQ workers,
 * sandbox processes. Judged on this process alone: its TCP sockets and its child processes.
 */

const tcpSockets = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length;
/** Child processes of this process other than `ps` itself. */
const children = () =>
  execFileSync("ps", ["-o", "pid=,comm=", "--ppid", String(process.pid)], { encoding: "utf8" })
    .split("\n")
    .filter((l) => l.trim() !== "" && !/\bps$/.test(l.trim())).length;

let blocker: Server | undefined;

afterEach(async () => {
  await new Promise<void>((r) => (blocker ? blocker.close(() => r()) : r()));
  blocker = undefined;
});

describe("a failed start", () => {
  it("closes every connection, worker and sandbox process it opened, then rethrows", async () => {
    // The port is taken: listening fails after connections, workers and the sandbox started.
    const taken = createServer();
    blocker = taken;
    await new Promise<void>((r) => taken.listen(0, "127.0.0.1", () => r()));
    const address = taken.address();
    const port = typeof address === "object" && address ? address.port : 0;
    const socketsBefore = tcpSockets();
    const childrenBefore = children();

    await expect(startTestDaemon({ PORT: String(port), PUBLIC_URL: `http://127.0.0.1:${port}` })).rejects.toThrow(/EADDRINUSE/);

    // Everything the start opened goes (connections quit, sandbox processes exit).
    await waitFor(() => tcpSockets() <= socketsBefore && children() <= childrenBefore, { timeoutMs: 20_000 });
    expect(tcpSockets()).toBeLessThanOrEqual(socketsBefore);
    expect(children()).toBeLessThanOrEqual(childrenBefore);
  }, 40_000);
});
