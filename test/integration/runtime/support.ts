import { expect } from "vitest";
import type { Client, Reply } from "../../helpers/daemon.js";

/** Shared helpers of the runtime integration tests. */

// biome-ignore lint/suspicious/noExplicitAny: API objects are read as arbitrary JSON in tests.
export type Json = any;

export function expectStatus(res: Reply, status: number): void {
  expect(res.status, `${res.status}: ${res.text.slice(0, 500)}`).toBe(status);
}

export async function createSource(api: Client, code: string): Promise<Json> {
  const res = await api.post("/v1/sources", { json: { component_code: code } });
  expectStatus(res, 200);
  return res.body.data;
}

/** A channel's events with full payloads, newest first (as the API lists them). */
export async function eventsNewestFirst(api: Client, sourceId: string, eventName?: string): Promise<Json[]> {
  const res = await api.get(`/v1/sources/${sourceId}/event_summaries`, { query: { limit: 100, expand: "event", event_name: eventName } });
  expectStatus(res, 200);
  return res.body.data;
}

/** A channel's events with full payloads, oldest first. */
export async function events(api: Client, sourceId: string, eventName?: string): Promise<Json[]> {
  return [...(await eventsNewestFirst(api, sourceId, eventName))].reverse();
}
