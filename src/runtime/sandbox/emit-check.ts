import { channelNameProblem, MAX_EMIT_ID_LENGTH, MAX_SUMMARY_LENGTH } from "../../domain/emit-rules.js";
import { exceedsDepth, MAX_JSON_DEPTH } from "../../domain/json-depth.js";
import type { EmitMeta } from "./types.js";

/**
 * The host's checks of what `$emit` and `db.set` hand over (host-bridge.ts): the same rules as
 * the workflow ingress (domain/emit-rules.ts, domain/json-depth.ts), applied inside the run so
 * that a refused value throws where the component can see it, and its other emits are kept.
 * Without them a run could record an event the rest of the daemon cannot store or serialise (an
 * event nested 5000 deep failed the whole run's recording, its `$errors` record included) or a
 * channel the API then refuses to list or delete.
 */

/** The emit's metadata (the guest's `emitMeta` output, as JSON), checked field by field. */
export function checkEmitMeta(metaJson: string): EmitMeta {
  const raw: unknown = JSON.parse(metaJson);
  const meta: EmitMeta = {};
  if (typeof raw !== "object" || raw === null) return meta;
  const m = raw as Record<string, unknown>;
  if (typeof m.id === "string") {
    if (m.id.length > MAX_EMIT_ID_LENGTH) throw new Error(`$emit: meta.id must be at most ${MAX_EMIT_ID_LENGTH} characters`);
    meta.id = m.id;
  } else if (typeof m.id === "number" && Number.isFinite(m.id)) {
    meta.id = m.id;
  }
  if (typeof m.name === "string" && m.name !== "") {
    const problem = channelNameProblem(m.name);
    if (problem) throw new Error(`$emit: meta.name ${problem}`);
    meta.name = m.name;
  }
  if (typeof m.summary === "string") {
    if (m.summary.length > MAX_SUMMARY_LENGTH) throw new Error(`$emit: meta.summary must be at most ${MAX_SUMMARY_LENGTH} characters`);
    meta.summary = m.summary;
  }
  if (typeof m.ts === "number" && Number.isFinite(m.ts)) meta.ts = m.ts;
  return meta;
}

/** Parses JSON handed over by the guest, refusing values nested deeper than the ingress allows. */
export function parseShallow(json: string, what: string): unknown {
  const value: unknown = JSON.parse(json);
  if (exceedsDepth(value)) throw new Error(`${what} nests deeper than ${MAX_JSON_DEPTH} levels`);
  return value;
}
