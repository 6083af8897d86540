import { execFileSync } from "node:child_process";
import type { TestProject } from "vitest/node";
import { startEmbeddedRedis, redisServerOnPath, type EmbeddedRedis } from "../../src/redis/embedded.js";

/**
 * Finds a Redis for the whole run, in this order: REDIS_URL; testcontainers when a Docker engine
 * answers; a private redis-server spawned from PATH. Each test then works under its own key prefix
 * (see `test/helpers/redis.ts`), so tests never see each other's data.
 */
declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

function dockerAnswers(): boolean {
  try {
    execFileSync("docker", ["info"], { stdio: "ignore", timeout: 3000 });
    return true;
  } catch {
    return false;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.REDIS_URL) {
    project.provide("redisUrl", process.env.REDIS_URL);
    return async () => {};
  }
  if (dockerAnswers()) {
    const { GenericContainer } = await import("testcontainers");
    const container = await new GenericContainer("redis:7-alpine").withExposedPorts(6379).start();
    project.provide("redisUrl", `redis://${container.getHost()}:${container.getMappedPort(6379)}`);
    return async () => {
      await container.stop();
    };
  }
  if (!redisServerOnPath()) {
    throw new Error("tests need Redis: set REDIS_URL, start a Docker engine, or install redis-server (apt-get install redis-server)");
  }
  const redis: EmbeddedRedis = await startEmbeddedRedis();
  project.provide("redisUrl", redis.url);
  return () => redis.close();
}
