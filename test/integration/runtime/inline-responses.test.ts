import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/receiver.js";
import { createSource, events, expectStatus, type Json } from "./support.js";

/**
 * customResponse runs (issue 12 item 5, runtime/source-requests.ts): the caller gets the answer
 * as soon as the component calls `this.http.respond()`, while its run goes on (its emits still
 * count), and SOURCE_INLINE_CONCURRENCY sets how many such runs of one source go on at once. The
 * runs wait on a loopback "gate" the test opens only once it has seen what it checks, so the
 * order of events is asserted, never a duration. Real daemon, Redis and sandbox processes.
 */

const INLINE = 3; // not the default (2): the setting must be what decides

let td: TestDaemon;
let anon: Client;
let gate: Server;
let gateUrl: string;
/** Requests waiting at the gate, answered by `open`. */
const held: { path: string; res: ServerResponse }[] = [];
let gateHits = 0;

beforeAll(async () => {
  td = await startTestDaemon({ SANDBOX_TIMEOUT_MS: "8000", SOURCE_INLINE_CONCURRENCY: String(INLINE) });
  anon = client(td.url);
  gate = createServer((req: IncomingMessage, res: ServerResponse) => {
    gateHits++;
    held.push({ path: req.url ?? "", res });
  });
  await new Promise<void>((resolve) => gate.listen(0, "127.0.0.1", resolve));
  gateUrl = `http://127.0.0.1:${(gate.address() as AddressInfo).port}`;
});

afterAll(async () => {
  open();
  gate?.closeAllConnections();
  await new Promise((resolve) => gate?.close(resolve));
  await td?.close();
});

/** Answers every request waiting at the gate with its own path. */
function open(): void {
  for (const { path, res } of held.splice(0)) res.end(`released ${path}`);
}

const endpointOf = (s: Json): string => String(s.configured_props.http.endpoint_url);

const component = (body: string) => `module.exports = {
  name: "Inline",
  version: "0.0.1",
  props: { http: { type: "$.interface.http", customResponse: true } },
  async run(event) { ${body} },
};`;

describe("inline custom responses", () => {
  it("answer at respond(), before the run ends; the run goes on and its emits are recorded", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      component(`
        this.http.respond({ status: 201, body: "answered" });
        const r = await fetch(event.body.gate);
        this.$emit({ after: await r.text() });`),
    );
    const hitsBefore = gateHits;
    const res = await anon.post(endpointOf(s), { json: { gate: `${gateUrl}/after-respond` } });
    // The answer came while the run still waits at the gate (which nothing has opened yet).
    expectStatus(res, 201);
    expect(res.text).toBe("answered");
    await waitFor(() => gateHits > hitsBefore, { what: "the run to reach the gate" });
    expect(held.map((h) => h.path)).toEqual(["/after-respond"]);
    expect(await events(u.api, s.id)).toEqual([]);
    open();
    // The run carried on past its answer: its emit is recorded, and it did not fail.
    const [e] = await waitFor(
      async () => {
        const got = await events(u.api, s.id);
        return got.length > 0 ? got : undefined;
      },
      { what: "the emit made after the answer" },
    );
    expect(e.event).toEqual({ after: "released /after-respond" });
    expect(await events(u.api, s.id, "$errors")).toEqual([]);
  });

  it("let SOURCE_INLINE_CONCURRENCY runs of one source go on at once, answer 429 past it, and take more once they end", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      component(`
        const r = await fetch(event.body.gate);
        this.http.respond({ status: 200, body: await r.text() });`),
    );
    const send = (i: number) => anon.post(endpointOf(s), { json: { gate: `${gateUrl}/run-${i}` } });
    const hitsBefore = gateHits;
    const first = Array.from({ length: INLINE }, (_, i) => send(i));
    // All of them run at once: each is waiting at the gate.
    await waitFor(() => gateHits - hitsBefore >= INLINE, { what: `${INLINE} runs waiting at the gate` });
    const refused = await send(INLINE);
    expectStatus(refused, 429);
    expect(refused.body.code).toBe("too_many_inline_runs");
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(gateHits - hitsBefore).toBe(INLINE);
    open();
    const answers = await Promise.all(first);
    expect(answers.map((a) => [a.status, a.text]).sort()).toEqual(
      Array.from({ length: INLINE }, (_, i) => [200, `released /run-${i}`]).sort(),
    );
    // The slots are free again once the runs ended.
    const later = send(99);
    await waitFor(() => held.length > 0, { what: "the next run at the gate" });
    open();
    const next = await later;
    expectStatus(next, 200);
    expect(next.text).toBe("released /run-99");
  });

  it("answer from the db state the source's earlier runs saved (read with the request's rates and quota)", async () => {
    const u = await td.createUser();
    const s = await createSource(
      u.api,
      `module.exports = {
        name: "Counter",
        version: "0.0.1",
        props: { db: "$.service.db", http: { type: "$.interface.http", customResponse: true } },
        async run(event) {
          const n = (this.db.get("n") ?? 0) + 1;
          this.db.set("n", n);
          this.http.respond({ status: 200, body: String(n) });
          console.log("run", n);
        },
      };`,
    );
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) {
      // A run saves its db state after answering, before it records its $logs line: the next
      // request waits for that line.
      if (i > 0) await waitFor(async () => (await events(u.api, s.id, "$logs")).length === i, { what: `run ${i}'s $logs line` });
      const res = await anon.post(endpointOf(s), { json: {} });
      expectStatus(res, 200);
      answers.push(res.text);
    }
    expect(answers).toEqual(["1", "2", "3", "4"]);
  });
});
