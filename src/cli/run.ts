import { readFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { pino } from "pino";
import { createConnections } from "../app/connections.js";
import { createCore } from "../app/core.js";
import { redisTarget, requestCommandTimeoutMs } from "../app/redis-client.js";
import { Shutdown } from "../app/shutdown.js";
import { ConfigError, loadConfig } from "../config/load.js";
import { AppError } from "../domain/errors.js";
import { packageVersion, projectRoot } from "../paths.js";
import { embeddedUrlFile } from "../redis/embedded.js";
import { parseNewUser } from "../services/users.js";
import { formatPlacement, migrate, shardPlacement } from "./layout-commands.js";
import { checkReadiness, defaultHealthUrl, HEALTHCHECK_TIMEOUT_MS } from "./healthcheck.js";

const CREATE_USAGE = "tributary users create --username NAME --email EMAIL [--plan free|paid]";

const USAGE = `usage: tributary <command>   (tributary --version prints the version)
  users create --username NAME --email EMAIL [--plan free|paid]   prints the new user and its API key
  users list                                                      lists users
  users rotate-key USER_ID                                        issues a new key; the old one stops working
  users delete USER_ID                                            removes the user and all their data, as the admin API does
                                                                  (sources' deactivate hooks run here; timers stop)
  migrate                                                         moves the data of an older key layout to this one (stop every
                                                                  process of the older version first; README "Upgrading")
  cluster shards                                                  prints each outbox shard's hash tag, slot and node
  healthcheck [--url URL]                                         exits 0 when URL/readyz answers 200 within 2 s, else 1
                                                                  with one line on stderr (default: http://127.0.0.1:$OPS_PORT or $PORT)

The users, migrate and cluster commands read REDIS_URL, REDIS_SENTINELS or REDIS_CLUSTER_NODES (or the embedded Redis of a daemon started from this folder) and REDIS_KEY_PREFIX.`;

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
}

export interface CliOptions {
  /** Where registry components live (default: the project's registry folder). */
  registryDir?: string;
}

/**
 * Operator CLI (SPEC §4): the admin API's user commands, straight against Redis, no token needed.
 * Returns the exit code; main.ts is the process around it.
 */
export async function runCli(argv: string[], env: NodeJS.ProcessEnv, io: CliIo, opts: CliOptions = {}): Promise<number> {
  try {
    return await run(argv, env, io, opts);
  } catch (err) {
    const message = err instanceof AppError || err instanceof ConfigError ? err.message : String((err as Error)?.message ?? err);
    io.stderr(`tributary: ${message}\n`);
    return 1;
  }
}

async function run(argv: string[], env: NodeJS.ProcessEnv, io: CliIo, opts: CliOptions): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      username: { type: "string" },
      email: { type: "string" },
      plan: { type: "string" },
      url: { type: "string" },
      help: { type: "boolean", short: "h" },
      version: { type: "boolean", short: "v" },
    },
  });
  const [group, command, arg] = positionals;
  if (values.version) {
    io.stdout(`tributary ${packageVersion()}\n`);
    return 0;
  }
  if (values.help || group === undefined) {
    io.stdout(`${USAGE}\n`);
    return values.help ? 0 : 2;
  }
  const unknown = unknownCommand(group, command);
  if (unknown) {
    io.stderr(`tributary: ${unknown}\n${USAGE}\n`);
    return 2;
  }
  if (group === "healthcheck") return healthcheck(values.url, env, io);
  if (group === "users" && command === "create") {
    const missing = (["username", "email"] as const).filter((o) => values[o] === undefined).map((o) => `--${o}`);
    if (missing.length > 0) {
      io.stderr(`tributary users create: ${missing.join(" and ")} ${missing.length > 1 ? "are" : "is"} missing (usage: ${CREATE_USAGE})\n`);
      return 2;
    }
  }
  const config = loadConfig(env);
  const shape = config.redisHa.shape.kind;
  const url = config.redisUrl ?? (shape === "single" ? readEmbeddedUrl(config.dataDir) : undefined);
  if (!url && shape === "single") {
    io.stderr("tributary: set REDIS_URL (no embedded Redis of a running daemon was found under DATA_DIR)\n");
    return 1;
  }
  const print = (value: unknown) => io.stdout(`${JSON.stringify(value, null, 2)}\n`);
  // Logs go to stderr: stdout carries the command's JSON answer.
  const logger = pino({ level: config.logLevel, base: { service: "tributary-cli" } }, pino.destination(2));
  // The daemon's own graph (app/core.ts) over one shared connection; nothing here starts a worker
  // or listens. `users delete` is the admin API's UserDeletion: deactivate hooks run in a local
  // sandbox, timers are handed to the scheduler role through its control stream.
  const shutdown = new Shutdown(config.shutdownTimeoutMs, logger);
  const conns = createConnections(redisTarget(config, url), { commandTimeoutMs: requestCommandTimeoutMs(config), logger, shared: true });
  shutdown.on("redis", "connections", () => conns.closeAll());
  const registryDir = opts.registryDir ?? path.join(projectRoot(), "registry");
  const core = createCore({ config, logger, conns, registryDir, shutdown });
  const users = core.stores.users;
  try {
    if (group === "migrate") {
      print(await migrate({ redis: conns.commands, keys: core.keys, connection: conns.queues }));
      return 0;
    }
    if (group === "cluster") {
      io.stdout(formatPlacement(await shardPlacement(conns.commands, core.keys)));
      return 0;
    }
    // The daemon's start-up check: OUTBOX_SHARDS agrees with the deployment (layout-1 data migrated first).
    await core.prepare();
    switch (command) {
      case "create": {
        const { user, apiKey } = await users.create(
          parseNewUser({ username: values.username, email: values.email, plan: values.plan ?? "free" }),
        );
        print({ id: user.id, username: user.username, email: user.email, plan: user.plan, api_key: apiKey });
        return 0;
      }
      case "list":
        print((await users.list()).map((u) => ({ id: u.id, username: u.username, email: u.email, plan: u.plan })));
        return 0;
      case "rotate-key":
        print({ id: arg, api_key: await users.rotateKey(required(arg)) });
        return 0;
      case "delete": {
        const id = required(arg);
        await core.services.userDeletion.delete(id);
        print({ id, deleted: true });
        return 0;
      }
      default:
        // unknownCommand() let no other command through.
        throw new Error(`unhandled command users ${command}`);
    }
  } finally {
    await shutdown.run();
  }
}

/** The commands by group; a group of one command has none below it. */
const COMMANDS: Readonly<Record<string, readonly string[]>> = {
  users: ["create", "list", "rotate-key", "delete"],
  migrate: [],
  cluster: ["shards"],
  healthcheck: [],
};

/** What is wrong with `group command` as a command line, naming it; undefined when it is a command. */
export function unknownCommand(group: string, command: string | undefined): string | undefined {
  const below = COMMANDS[group];
  if (below === undefined) return `unknown command "${group}" (commands: ${Object.keys(COMMANDS).join(", ")})`;
  if (below.length === 0) return undefined;
  if (command === undefined) return `"${group}" needs a command: ${below.join(", ")}`;
  if (!below.includes(command)) return `unknown command "${group} ${command}" (${group} commands: ${below.join(", ")})`;
  return undefined;
}

/**
 * `tributary healthcheck` (SPEC §11), the container's HEALTHCHECK: no Redis, no core, one request.
 * The configuration is read only when no --url is given, for the daemon's own address
 * (OPS_PORT when set, else PORT).
 */
async function healthcheck(url: string | undefined, env: NodeJS.ProcessEnv, io: CliIo): Promise<number> {
  let base = url;
  if (base === undefined) {
    const config = loadConfig(env);
    // The ops listener when there is one: processes without the api role serve only that.
    base = defaultHealthUrl(config.host, config.opsPort ?? config.port);
  }
  const verdict = await checkReadiness(base, HEALTHCHECK_TIMEOUT_MS);
  if (verdict.ok) return 0;
  io.stderr(`tributary healthcheck: ${verdict.reason}\n`);
  return 1;
}

function required(id: string | undefined): string {
  if (!id) throw new AppError(400, "invalid_parameter", "USER_ID is required");
  return id;
}

function readEmbeddedUrl(dataDir: string): string | undefined {
  try {
    return readFileSync(embeddedUrlFile(path.resolve(dataDir, "redis")), "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}
