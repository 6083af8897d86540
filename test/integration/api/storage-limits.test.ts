import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Client, TestDaemon } from "../../helpers/daemon.js";
import { startTestDaemon } from "../../helpers/daemon.js";
import { waitFor } from "../../helpers/wait.js";
import { createSource, expectLimit, expectStatus, type Json, usage, workflowId } from "./support.js";

/**
 * What one user's event streams may hold (MAX_STREAMS_PER_USER, MAX_STORED_MB_PER_USER): checked
 * in the record step itself, shown with their usage in GET /v1/users/me, given back by deletions.
 * Workflow emits and source emits count alike.
 */

let td: TestDaemon;

beforeAll(async () => {
  td = await startTestDaemon({ MAX_STREAMS_PER_USER: "4", MAX_STORED_MB_PER_USER: "1" });
});

afterAll(async () => {
  await td?.close();
});

const MB = 1024 * 1024;

const post = (api: Client, workflow: string, body: unknown) => api.post(`/v1/workflows/${workflow}/events`, { json: body });

/** A source that emits each request's body onto the event name the body gives. */
const NAMED_EMITTER = `module.exports = {
  name: "Named emitter",
  version: "0.0.1",
  props: { http: "$.interface.http" },
  async run(event) { this.$emit(event.body, { name: event.body.name }); },
};`;

describe("storage limits per user", () => {
  it("refuses an emit onto a new name past the streams limit, keeps the existing names, and a deletion frees", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const q = workflowId();
    for (const name of ["a", "b", "c"]) expectStatus(await post(u.api, p, { event: { name }, name }), 202);
    expectStatus(await post(u.api, q, { event: 1, name: "x" }), 202);
    expect((await usage(u.api)).streams).toEqual({ limit: 4, used: 4 });

    const refused = await post(u.api, p, { event: { over: true }, name: "d" });
    expectLimit(refused, "streams");
    expect(refused.body.error).toMatch(/this user has 4 event streams .*at most 4 are allowed/);
    expect((await u.api.get(`/v1/workflows/${p}/event_summaries`, { query: { event_name: "d" } })).body.data).toEqual([]);
    // The streams in use keep taking events, single and batched.
    expectStatus(await post(u.api, p, { event: 2, name: "a" }), 202);
    expectStatus(
      await post(u.api, p, {
        events: [
          { event: 3, name: "b" },
          { event: 4, name: "b" },
        ],
      }),
      202,
    );

    const before = (await usage(u.api)).stored_bytes.used;
    expectStatus(await u.api.del(`/v1/workflows/${q}`), 204);
    const after = await usage(u.api);
    expect(after.streams).toEqual({ limit: 4, used: 3 });
    expect(after.stored_bytes.used).toBeLessThan(before);
    expectStatus(await post(u.api, p, { event: { now: "room" }, name: "d" }), 202);
  });

  it("refuses events that would take the stored bytes past the limit, shows the usage, and a deletion frees", async () => {
    const u = await td.createUser();
    const p = workflowId();
    const big = "x".repeat(250_000);
    for (let i = 0; i < 4; i++) expectStatus(await post(u.api, p, { event: { big, i } }), 202);
    const shown = await usage(u.api);
    expect(shown.stored_bytes.limit).toBe(MB);
    expect(shown.stored_bytes.used).toBeGreaterThan(4 * 250_000);
    expect(shown.stored_bytes.used).toBeLessThanOrEqual(MB);
    expect(shown.streams).toEqual({ limit: 4, used: 1 });

    const refused = await post(u.api, p, { event: { big, i: 4 } });
    expectLimit(refused, "stored_bytes");
    expect(refused.body.error).toMatch(/event streams hold \d+ bytes and these events need \d+ more, at most 1048576 are allowed/);
    expect((await usage(u.api)).stored_bytes.used).toBe(shown.stored_bytes.used);
    // Another user is not held back by this one's storage.
    const other = await td.createUser();
    expectStatus(await post(other.api, workflowId(), { event: { big } }), 202);

    expectStatus(await u.api.del(`/v1/workflows/${p}`), 204);
    expect((await usage(u.api)).stored_bytes).toEqual({ limit: MB, used: 0 });
    expectStatus(await post(u.api, p, { event: { big, i: 5 } }), 202);
  });

  it("counts a source's streams, refuses its emits onto new names past the limit, and frees them when it is deleted", async () => {
    const u = await td.createUser();
    const source = await createSource(u.api, { component_code: NAMED_EMITTER });
    const endpoint: string = source.configured_props.http.endpoint_url;
    const send = async (name: string) => {
      const res = await fetch(endpoint, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name }),
      });
      expect(res.status).toBe(200);
    };
    const summaries = async (name: string) =>
      (await u.api.get(`/v1/sources/${source.id}/event_summaries`, { query: { event_name: name } })).body.data as Json[];
    for (const name of ["s1", "s2", "s3", "s4"]) {
      await send(name);
      await waitFor(async () => (await summaries(name)).length === 1, { what: `the source's emit onto ${name}` });
    }
    expect((await usage(u.api)).streams).toEqual({ limit: 4, used: 4 });
    await send("s5");
    await send("s1");
    // The run that emitted onto s1 (an existing stream) was recorded; s5's never was.
    await waitFor(async () => (await summaries("s1")).length === 2, { what: "the second emit onto s1" });
    expect(await summaries("s5")).toEqual([]);
    expect((await usage(u.api)).streams.used).toBe(4);

    expectStatus(await u.api.del(`/v1/sources/${source.id}`), 204);
    expect((await usage(u.api)).streams).toEqual({ limit: 4, used: 0 });
  });
});
