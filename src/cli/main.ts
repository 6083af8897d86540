#!/usr/bin/env node
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { ConfigError, loadConfig } from "../config/load.js";
import { AppError } from "../domain/errors.js";
import { parseNewUser } from "../services/users.js";
import { createKeys } from "../store/keys.js";
import { UserStore } from "../store/users.js";
import { embeddedUrlFile } from "../redis/embedded.js";

const USAGE = `usage: tributary users <command>
  users create --username NAME --email EMAIL [--plan free|paid]   prints the new user and its API key
  users list                                                      lists users
  users rotate-key USER_ID                                        issues a new key; the old one stops working
  users delete USER_ID                                            removes the user and all their data (stop the daemon's sources first)

Reads REDIS_URL (or the embedded Redis of a daemon started from this folder) and REDIS_KEY_PREFIX.`;

/** Operator CLI (SPEC §4): the admin API's user commands, straight against Redis, no token needed. */
async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { username: { type: "string" }, email: { type: "string" }, plan: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  const [group, command, arg] = positionals;
  if (values.help || group !== "users" || !command) {
    process.stdout.write(`${USAGE}\n`);
    return values.help ? 0 : 2;
  }
  const config = loadConfig(process.env);
  const url = config.redisUrl ?? readEmbeddedUrl(config.dataDir);
  if (!url) {
    process.stderr.write("tributary: set REDIS_URL (no embedded Redis of a running daemon was found under DATA_DIR)\n");
    return 1;
  }
  const redis = new Redis(url, { maxRetriesPerRequest: 2 });
  const users = new UserStore({ redis, keys: createKeys(config.keyPrefix), now: Date.now, randomBytes: (n) => randomBytes(n) });
  try {
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
      case "delete":
        await users.delete(required(arg));
        print({ id: arg, deleted: true });
        return 0;
      default:
        process.stdout.write(`${USAGE}\n`);
        return 2;
    }
  } finally {
    redis.disconnect();
  }
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

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    const message = err instanceof AppError || err instanceof ConfigError ? err.message : String((err as Error)?.message ?? err);
    process.stderr.write(`tributary: ${message}\n`);
    process.exit(1);
  },
);
