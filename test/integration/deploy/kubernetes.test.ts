import { readdirSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { loadConfig } from "../../../src/config/load.js";
import { envSchema } from "../../../src/config/schema.js";
import { type K8sObject, kubectlKustomize, loadManifests, resolveKustomization } from "../../helpers/kustomize.js";

/**
 * deploy/kubernetes, resolved the way `kubectl apply -k` would (test/helpers/kustomize.ts,
 * and kubectl itself when installed): api, worker and scheduler Deployments whose whole environment
 * is a valid configuration of the daemon with one role each, probes on /healthz and /readyz at the
 * port the process serves them on, a Service and PodDisruptionBudget that select the api pods.
 */

const DIR = path.resolve(import.meta.dirname, "../../../deploy/kubernetes");
const objects = resolveKustomization(DIR);
const KNOWN_ENV = new Set(Object.keys(envSchema.shape));

const ofKind = (kind: string) => objects.filter((o) => o.kind === kind);
const byName = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const matches = (selector: Record<string, string>, labels: Record<string, string> | undefined) =>
  Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

interface Container {
  name: string;
  env?: { name: string; value?: string; valueFrom?: unknown }[];
  envFrom?: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
  ports?: { name?: string; containerPort: number }[];
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
}
const containerOf = (d: K8sObject) => (d.spec.template.spec.containers as Container[])[0]!;

/** The environment a container's process sees: envFrom (ConfigMaps, Secrets), then env. */
function environmentOf(c: Container): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? []) {
    const source = from.configMapRef ? byName("ConfigMap", from.configMapRef.name) : byName("Secret", from.secretRef?.name ?? "");
    if (!source) throw new Error(`${c.name}: envFrom names a missing object ${JSON.stringify(from)}`);
    Object.assign(env, source.data ?? {}, source.stringData ?? {});
  }
  for (const e of c.env ?? []) {
    if (e.value === undefined) throw new Error(`${c.name}: ${e.name} has no literal value`);
    env[e.name] = e.value;
  }
  return env;
}

/** A probe's or Service's port (a number or a container port's name) as a number. */
function portNumber(c: Container, port: string | number): number | undefined {
  return typeof port === "number" ? port : c.ports?.find((p) => p.name === port)?.containerPort;
}

const deployments = ofKind("Deployment");

describe("deploy/kubernetes", () => {
  it("resolves to the expected objects", () => {
    for (const o of objects) {
      expect(o.apiVersion, JSON.stringify(o.metadata)).toBeTruthy();
      expect(o.metadata?.name, o.kind).toBeTruthy();
    }
    expect(new Set(objects.map((o) => o.kind))).toEqual(new Set(["ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget"]));
    expect(deployments.map((d) => d.metadata.name).sort()).toEqual(["tributary-api", "tributary-scheduler", "tributary-worker"]);
  });

  it("gives each Deployment one role, all three together, in a configuration the daemon accepts", () => {
    const roles = deployments.map((d) => {
      const env = environmentOf(containerOf(d));
      expect(env.ROLES, d.metadata.name).toBeDefined();
      const config = loadConfig(env); // throws ConfigError naming an invalid setting
      expect(config.roles, d.metadata.name).toHaveLength(1);
      expect(d.metadata.name).toBe(`tributary-${config.roles[0]}`);
      expect(config.redisUrl, `${d.metadata.name}: an external Redis, never the embedded one`).toBeDefined();
      return config.roles[0];
    });
    expect(roles.sort()).toEqual(["api", "scheduler", "worker"]);
  });

  it("sets only environment variables the daemon knows", () => {
    const names = [
      ...deployments.flatMap((d) => Object.keys(environmentOf(containerOf(d)))),
      ...ofKind("ConfigMap").flatMap((o) => Object.keys(o.data ?? {})),
      ...ofKind("Secret").flatMap((o) => [...Object.keys(o.data ?? {}), ...Object.keys(o.stringData ?? {})]),
    ];
    expect(names.filter((n) => !KNOWN_ENV.has(n))).toEqual([]);
  });

  it("probes /healthz (liveness) and /readyz (readiness) on the port the process serves them on, and is scraped there", () => {
    for (const d of deployments) {
      const c = containerOf(d);
      const config = loadConfig(environmentOf(c));
      // The api role serves them on PORT; other roles only on the ops listener (OPS_PORT).
      const opsPort = config.roles.includes("api") ? config.port : config.opsPort;
      expect(opsPort, `${d.metadata.name} serves no HTTP`).toBeDefined();
      expect(c.livenessProbe?.httpGet?.path, d.metadata.name).toBe("/healthz");
      expect(c.readinessProbe?.httpGet?.path, d.metadata.name).toBe("/readyz");
      expect(portNumber(c, c.livenessProbe?.httpGet?.port ?? -1), d.metadata.name).toBe(opsPort);
      expect(portNumber(c, c.readinessProbe?.httpGet?.port ?? -1), d.metadata.name).toBe(opsPort);
      const annotations = d.spec.template.metadata.annotations ?? {};
      expect(annotations["prometheus.io/port"], d.metadata.name).toBe(String(opsPort));
    }
  });

  it("selects each Deployment's own pods, and only the api pods from the Service and a PodDisruptionBudget", () => {
    const podLabels = (name: string) => byName("Deployment", name)?.spec.template.metadata.labels as Record<string, string>;
    for (const d of deployments) {
      expect(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels), d.metadata.name).toBe(true);
      for (const other of deployments.filter((o) => o !== d))
        expect(
          matches(d.spec.selector.matchLabels, podLabels(other.metadata.name)),
          `${d.metadata.name} selects ${other.metadata.name}`,
        ).toBe(false);
    }
    const [service] = ofKind("Service");
    expect(ofKind("Service")).toHaveLength(1);
    const selected = (selector: Record<string, string>) =>
      deployments.filter((d) => matches(selector, podLabels(d.metadata.name))).map((d) => d.metadata.name);
    expect(selected(service!.spec.selector)).toEqual(["tributary-api"]);
    const api = containerOf(byName("Deployment", "tributary-api")!);
    for (const p of service!.spec.ports as { targetPort: string | number }[])
      expect(portNumber(api, p.targetPort)).toBe(loadConfig(environmentOf(api)).port);
    const pdbs = ofKind("PodDisruptionBudget").map((p) => selected(p.spec.selector.matchLabels));
    expect(pdbs).toContainEqual(["tributary-api"]);
  });

  it("gives api and worker pods a memory limit that holds the sandbox at its worst", () => {
    // Isolates, each up to SANDBOX_MEMORY_MB: a process's pool for source runs and hooks, and an api
    // process's for customResponse runs and for reading components' metadata (16, a constant). Beside
    // them the daemon (256 MiB) and one sandbox process per pool (128 MiB each: node, the code cache).
    const META_ISOLATES = 16;
    for (const d of deployments) {
      const config = loadConfig(environmentOf(containerOf(d)));
      const api = config.roles.includes("api");
      const runsOrHooks = api || config.roles.includes("worker");
      const isolates =
        (runsOrHooks ? Math.max(16, 2 * config.sourceRunConcurrency) : 0) + (api ? config.sourceInlineIsolates + META_ISOLATES : 0);
      const pools = (runsOrHooks ? 1 : 0) + (api ? 2 : 0);
      const needMib = isolates * config.sandboxMemoryMb + 256 + 128 * pools;
      const limit = (d.spec.template.spec.containers[0].resources?.limits?.memory ?? "") as string;
      expect(limit, `${d.metadata.name}: memory limit in Mi or Gi`).toMatch(/^\d+(Mi|Gi)$/);
      const limitMib = Number.parseInt(limit, 10) * (limit.endsWith("Gi") ? 1024 : 1);
      expect(limitMib, `${d.metadata.name}: ${isolates} isolates x ${config.sandboxMemoryMb} MiB + the daemon`).toBeGreaterThanOrEqual(
        needMib,
      );
    }
  });

  it("builds with kubectl kustomize to the same objects, when kubectl is installed", () => {
    const built = kubectlKustomize(DIR);
    if (!built) return; // No kubectl here: the resolver above is the check.
    expect(built.status, built.output).toBe(0);
    const fromKubectl = parseAllDocuments(built.output).map((d) => d.toJS() as K8sObject);
    const ids = (list: K8sObject[]) => list.map((o) => `${o.kind}/${o.metadata.name}`).sort();
    expect(ids(fromKubectl)).toEqual(ids(objects));
  });
});

/** The Redis shape each overlay switches to, and the variables that name it. */
const OVERLAY_SHAPES: Record<string, { kind: string; names: string[] }> = {
  "redis-sentinel": { kind: "sentinel", names: ["REDIS_SENTINELS", "REDIS_SENTINEL_NAME"] },
  "redis-cluster": { kind: "cluster", names: ["REDIS_CLUSTER_NODES"] },
};

describe("deploy/kubernetes/overlays (Redis Sentinel, Redis Cluster)", () => {
  const OVERLAYS = path.join(DIR, "overlays");
  const overlays = readdirSync(OVERLAYS, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name);

  it("are both active, each a configuration of its shape the daemon accepts", () => {
    expect(overlays.sort()).toEqual(Object.keys(OVERLAY_SHAPES).sort());
    for (const o of overlays) {
      const [secret] = loadManifests(path.join(OVERLAYS, o, "secret.yaml"));
      expect(secret?.kind, o).toBe("Secret");
      expect(secret?.metadata.name, o).toBe("tributary-secrets");
      const set = Object.entries(secret?.stringData ?? {});
      // REDIS_URL is deleted (null): two shapes at once are a start-up error.
      expect(set.filter(([, v]) => v === null).map(([k]) => k)).toEqual(["REDIS_URL"]);
      const env = Object.fromEntries(set.filter(([, v]) => v !== null)) as Record<string, string>;
      expect(Object.keys(env), o).toEqual(expect.arrayContaining(OVERLAY_SHAPES[o]!.names));
      expect(Object.keys(env).filter((n) => !KNOWN_ENV.has(n))).toEqual([]);
      expect(loadConfig(env).redisHa.shape.kind, o).toBe(OVERLAY_SHAPES[o]!.kind);
    }
  });

  it("build with kubectl kustomize on the base, with REDIS_URL replaced, when kubectl is installed", () => {
    for (const o of overlays) {
      const built = kubectlKustomize(path.join(OVERLAYS, o));
      if (!built) return; // No kubectl here: the check above is the one that runs.
      expect(built.status, built.output).toBe(0);
      const objects = parseAllDocuments(built.output).map((d) => d.toJS() as K8sObject);
      const secret = objects.find((x) => x.kind === "Secret");
      expect(Object.keys(secret?.stringData ?? {}), o).not.toContain("REDIS_URL");
      expect(Object.keys(secret?.stringData ?? {}), o).toEqual(expect.arrayContaining(OVERLAY_SHAPES[o]!.names));
      expect(
        objects
          .filter((x) => x.kind === "Deployment")
          .map((d) => d.metadata.name)
          .sort(),
      ).toEqual(deployments.map((d) => d.metadata.name).sort());
    }
  });
});
