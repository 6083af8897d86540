import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { loadConfig } from "../../../src/config/load.js";

/**
 * The compose files and the image's build context have safe defaults: no compose file starts the
 * admin API with a token the operator did not choose, ports are published on loopback unless the
 * operator says otherwise, Tributary is given a Redis (the image has none), and the build context
 * leaves node_modules, data/ (the embedded Redis's files and password) and .git out.
 */

const ROOT = path.resolve(import.meta.dirname, "../../..");
const composeFiles = readdirSync(ROOT).filter((f) => /^docker-compose.*\.ya?ml$/.test(f));

interface Service {
  build?: unknown;
  image?: string;
  environment?: Record<string, string>;
  ports?: string[];
}
const servicesOf = (file: string) =>
  (parseYaml(readFileSync(path.join(ROOT, file), "utf8")) as { services: Record<string, Service> }).services;

/** `${NAME:?message}`: compose refuses to start while NAME is unset or empty (no `$` in the message: compose would read it as a variable). */
const REQUIRED = /^\$\{([A-Z_]+):\?[^}$]+\}$/;
/** `${NAME:-127.0.0.1}:host:container`: published on loopback unless NAME says otherwise. */
const LOOPBACK_PORT = /^\$\{[A-Z_]+:-127\.0\.0\.1\}:\d+:\d+$/;

describe("the compose files", () => {
  it("exist (docker-compose.yml and the Sentinel one)", () => {
    expect(composeFiles).toEqual(expect.arrayContaining(["docker-compose.yml", "docker-compose.sentinel.yml"]));
  });

  for (const file of composeFiles) {
    describe(file, () => {
      const services = servicesOf(file);
      const tributary = Object.entries(services).find(([, s]) => s.build !== undefined);

      it("builds Tributary from this repository", () => {
        expect(tributary, `${file}: a service with build:`).toBeDefined();
      });

      it("requires the operator's own ADMIN_TOKEN (no default)", () => {
        const token = tributary?.[1].environment?.ADMIN_TOKEN ?? "";
        expect(token).toMatch(REQUIRED);
        expect(REQUIRED.exec(token)?.[1]).toBe("ADMIN_TOKEN");
      });

      it("publishes every port on 127.0.0.1 by default", () => {
        const published = Object.entries(services).flatMap(([name, s]) => (s.ports ?? []).map((p) => `${name} ${p}`));
        expect(published.length).toBeGreaterThan(0);
        for (const p of published) expect(p.split(" ")[1], p).toMatch(LOOPBACK_PORT);
      });

      it("gives Tributary a Redis of the compose file (the image has no redis-server) in a configuration it accepts", () => {
        const env = { ...(tributary?.[1].environment ?? {}), ADMIN_TOKEN: "an-operator-token" };
        // Compose's ${VAR:-default} is resolved to its default, as `docker compose config` would.
        const resolved = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v.replace(/\$\{[A-Z_]+:-([^}]*)\}/g, "$1")]));
        const config = loadConfig(resolved);
        const hosts = [config.redisUrl ? new URL(config.redisUrl).hostname : "", ...(resolved.REDIS_SENTINELS ?? "").split(",")]
          .map((h) => h.split(":")[0])
          .filter(Boolean);
        expect(hosts.length, `${file}: REDIS_URL or REDIS_SENTINELS`).toBeGreaterThan(0);
        for (const h of hosts) expect(Object.keys(services), `${file}: ${h} is a service`).toContain(h);
      });
    });
  }
});

describe("the build context (.dockerignore)", () => {
  const file = path.join(ROOT, ".dockerignore");
  const entries = existsSync(file)
    ? readFileSync(file, "utf8")
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => l && !l.startsWith("#"))
    : [];

  it("leaves out node_modules, data/, dist, .git and test artefacts", () => {
    expect(entries).toEqual(expect.arrayContaining(["node_modules", "data", "dist", ".git", "coverage"]));
  });

  it("keeps what the Dockerfile copies", () => {
    const dockerfile = readFileSync(path.join(ROOT, "Dockerfile"), "utf8");
    const copied = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => (m[1] ?? "").split(/\s+/));
    expect(copied).toEqual(expect.arrayContaining(["package.json", "src", "registry", "config"]));
    for (const c of copied) expect(entries, c).not.toContain(c);
  });
});
