/**
 * Entry point of the baseline child processes (run with `node --import tsx`):
 *   koa     — a bare Koa app: JSON body parser + one POST handler answering 202.
 *   koa-evalsha — the same Koa stack as the daemon's API (koa, @koa/router, @koa/bodyparser)
 *             with the emit route, doing one Redis EVALSHA per request (a script that appends the
 *             event to a capped stream): the least any acknowledged emit must do.
 *   bullmq  — a plain BullMQ Worker that POSTs each job's payload with undici.
 * Each prints `READY <port|->` on stdout once it can take load, and stops on SIGTERM.
 */
import { bodyParser } from "@koa/bodyparser";
import Router from "@koa/router";
import { Worker } from "bullmq";
import { Redis } from "ioredis";
import Koa from "koa";
import { Agent, request } from "undici";

const mode = process.argv[2];

async function koa(): Promise<void> {
  const app = new Koa();
  let n = 0;
  app.use(bodyParser({ enableTypes: ["json"], jsonLimit: 512 * 1024, jsonStrict: true }));
  app.use(async (ctx) => {
    if (ctx.method !== "POST") {
      ctx.status = 404;
      return;
    }
    const body = (ctx.request as { body?: unknown }).body;
    if (body === null || typeof body !== "object") {
      ctx.status = 400;
      ctx.body = { error: "body must be an object", code: "invalid" };
      return;
    }
    ctx.status = 202;
    ctx.body = { data: { id: `${Date.now()}-${n++}` } };
  });
  const server = app.listen(0, "127.0.0.1", () => {
    const addr = server.address();
    process.stdout.write(`READY ${typeof addr === "object" && addr ? addr.port : 0}\n`);
  });
  server.keepAliveTimeout = 65_000;
  process.once("SIGTERM", () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}

/** Appends ARGV[1] to the capped stream KEYS[1] and returns its id. */
const APPEND_LUA = "return redis.call('XADD', KEYS[1], 'MAXLEN', '~', '100', '*', 'e', ARGV[1])";

async function koaEvalsha(): Promise<void> {
  const url = process.env.REDIS_URL;
  if (!url) throw new Error("REDIS_URL is required");
  const redis = new Redis(url, { maxRetriesPerRequest: null });
  redis.defineCommand("benchAppend", { numberOfKeys: 1, lua: APPEND_LUA });
  const append = (redis as unknown as Record<string, (key: string, value: string) => Promise<string>>).benchAppend;
  if (!append) throw new Error("script not defined");
  const app = new Koa();
  const router = new Router({ prefix: "/v1" });
  router.post("/workflows/:id/events", async (ctx) => {
    const body = (ctx.request as { body?: unknown }).body;
    if (body === null || typeof body !== "object") {
      ctx.status = 400;
      ctx.body = { error: "body must be an object", code: "invalid" };
      return;
    }
    const id = await append.call(redis, `bench:koa-evalsha:{${ctx.params.id}}`, JSON.stringify(body));
    ctx.status = 202;
    ctx.body = { data: { id } };
  });
  app.use(bodyParser({ enableTypes: ["json"], jsonLimit: 512 * 1024, jsonStrict: true }));
  app.use(router.routes());
  app.use(router.allowedMethods());
  const server = app.listen(0, "127.0.0.1", () => {
    const addr = server.address();
    process.stdout.write(`READY ${typeof addr === "object" && addr ? addr.port : 0}\n`);
  });
  server.keepAliveTimeout = 65_000;
  process.once("SIGTERM", () => {
    server.close(() => {
      redis.disconnect();
      process.exit(0);
    });
    server.closeAllConnections();
  });
}

async function bullmq(): Promise<void> {
  const env = (k: string) => {
    const v = process.env[k];
    if (!v) throw new Error(`${k} is required`);
    return v;
  };
  const target = env("TARGET_URL");
  const connection = new Redis(env("REDIS_URL"), { maxRetriesPerRequest: null });
  const agent = new Agent({ keepAliveTimeout: 4_000 });
  const worker = new Worker(
    env("QUEUE"),
    async (job) => {
      const res = await request(target, {
        dispatcher: agent,
        method: "POST",
        body: (job.data as { payload: string }).payload,
        headers: { "content-type": "application/json" },
      });
      await res.body.dump();
      if (res.statusCode < 200 || res.statusCode >= 300) throw new Error(`status ${res.statusCode}`);
    },
    { connection, prefix: env("PREFIX"), concurrency: Number(env("CONCURRENCY")) },
  );
  worker.on("error", (err) => process.stderr.write(`worker error: ${err.message}\n`));
  await worker.waitUntilReady();
  process.stdout.write("READY -\n");
  process.once("SIGTERM", () => {
    void (async () => {
      await worker.close();
      await agent.close();
      connection.disconnect();
      process.exit(0);
    })();
  });
}

if (mode === "koa") await koa();
else if (mode === "koa-evalsha") await koaEvalsha();
else if (mode === "bullmq") await bullmq();
else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
