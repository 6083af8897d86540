import type { RouteRegistrar } from "../route-groups.js";
import type { Context } from "koa";
import { ValidationError } from "../../domain/errors.js";
import { isEventId } from "../../domain/ids.js";
import { parseLimit } from "../../domain/pagination.js";
import { parseEmitBody, type Ingest } from "../../events/ingest.js";
import type { EventStore } from "../../store/events.js";
import type { MaintenanceJob } from "../../queue/catalog.js";
import type { SourceService } from "../../services/sources.js";
import type { WebhookService } from "../../services/webhooks.js";
import { parseEventName } from "../../services/subscriptions.js";
import { parseWorkflowId, type WorkflowService } from "../../services/workflows.js";
import { userIdOf } from "../middleware/auth.js";
import { noContent, params, sendData, sendPage } from "../params.js";

export interface EventRouteDeps {
  events: EventStore;
  ingest: Ingest;
  sources: SourceService;
  workflows: WorkflowService;
  /** For a webhook's health events (SPEC §12): 404 unless the webhook is the caller's. */
  webhooks: Pick<WebhookService, "get">;
  enqueueMaintenance: (job: MaintenanceJob) => Promise<void>;
  version: string;
}

function summaryQuery(ctx: Context) {
  const p = params(ctx);
  const expand = typeof p.expand === "string" && p.expand.split(",").some((s) => s.trim() === "event");
  const after = p.after === undefined || p.after === "" ? undefined : p.after;
  const before = p.before === undefined || p.before === "" ? undefined : p.before;
  if (after !== undefined && before !== undefined) throw new ValidationError("pass either after or before, not both");
  if ((after !== undefined && typeof after !== "string") || (before !== undefined && typeof before !== "string")) {
    throw new ValidationError("after and before must be event ids");
  }
  return { limit: parseLimit(p.limit), after, before, expand, channel: parseEventName(p.event_name, { required: false }) };
}

function optionalEventId(raw: unknown, name: string): string | null {
  if (raw === undefined || raw === null || raw === "") return null;
  if (!isEventId(raw)) throw new ValidationError(`${name} must be an event id (<ms>-<seq>)`);
  return raw;
}

/** Event summaries, event deletion and the workflow ingress (SPEC §2 event summaries, §3). */
export function eventRoutes(deps: EventRouteDeps) {
  return (router: RouteRegistrar): void => {
    router.get("/sources/:id/event_summaries", async (ctx) => {
      const userId = userIdOf(ctx);
      const source = await deps.sources.get(userId, ctx.params.id);
      const q = summaryQuery(ctx);
      sendPage(ctx, await deps.events.summaries(userId, source.id, q.channel, q));
    });

    // A webhook's health events ($delivery_failed, $webhook_disabled, $webhook_recovered: SPEC §12),
    // read like a source's events; its default channel exists but stays empty.
    router.get("/webhooks/:id/event_summaries", async (ctx) => {
      const userId = userIdOf(ctx);
      const webhook = await deps.webhooks.get(userId, ctx.params.id);
      const q = summaryQuery(ctx);
      sendPage(ctx, await deps.events.summaries(userId, webhook.id, q.channel, q));
    });

    router.delete("/sources/:id/events", async (ctx) => {
      const userId = userIdOf(ctx);
      const source = await deps.sources.get(userId, ctx.params.id);
      const p = params(ctx);
      const startId = optionalEventId(p.start_id, "start_id");
      const endId = optionalEventId(p.end_id, "end_id");
      const channel = parseEventName(p.event_name, { required: false });
      await deps.enqueueMaintenance({ kind: "delete-events", userId, emitterId: source.id, channel, startId, endId });
      noContent(ctx, 202);
    });

    const workflowSummaries = (fixedChannel?: string) => async (ctx: Context) => {
      const userId = userIdOf(ctx);
      const workflow = await deps.workflows.get(userId, (ctx as Context & { params: { id: string } }).params.id);
      const q = summaryQuery(ctx);
      sendPage(ctx, await deps.events.summaries(userId, workflow.id, fixedChannel ?? q.channel, q));
    };
    router.get("/workflows/:id/event_summaries", workflowSummaries());
    router.get("/workflows/:id/$errors/event_summaries", workflowSummaries("$errors"));

    // Not async (the emit's hot path): the router's compose turns a throw here into a rejection.
    const emit = (ctx: Context): Promise<void> => {
      const userId = userIdOf(ctx);
      const workflowId = parseWorkflowId((ctx as Context & { params: { id: string } }).params.id);
      const { batch, emits } = parseEmitBody((ctx.request as { body?: unknown }).body);
      return deps.ingest.workflowEmit(userId, workflowId, emits).then((ids) => {
        sendData(ctx, batch ? ids.map((id) => ({ id })) : { id: ids[0] }, 202);
      });
    };
    router.post("/workflows/:id/events", emit);

    router.post("/workflows/:id/$errors/events", async (ctx) => {
      const userId = userIdOf(ctx);
      const workflowId = parseWorkflowId(ctx.params.id);
      const id = await deps.ingest.workflowError(userId, workflowId, (ctx.request as { body?: unknown }).body, deps.version);
      sendData(ctx, { id }, 202);
    });
  };
}
