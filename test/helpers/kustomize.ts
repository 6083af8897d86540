import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { parseAllDocuments, parse as parseYaml } from "yaml";

/**
 * A small kustomize for the deploy/kubernetes tests (no kustomize binary offline): it follows
 * `resources` (files and directories with a kustomization.yaml) and refuses any other
 * transformation, so what it returns is what `kubectl apply -k` would apply.
 */

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects are checked field by field by the tests.
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [k: string]: any };

/** Fields of a kustomization this resolver understands; `images` only retags containers. */
const UNDERSTOOD = new Set(["apiVersion", "kind", "resources", "images", "namespace"]);

export function resolveKustomization(dir: string): K8sObject[] {
  const file = path.join(dir, "kustomization.yaml");
  const k = parseYaml(readFileSync(file, "utf8")) as Record<string, unknown>;
  const unknown = Object.keys(k).filter((key) => !UNDERSTOOD.has(key));
  if (unknown.length > 0) throw new Error(`${file}: fields this resolver does not apply: ${unknown.join(", ")}`);
  if (k.kind !== "Kustomization") throw new Error(`${file}: kind is ${String(k.kind)}`);
  const resources = (k.resources ?? []) as string[];
  return resources.flatMap((r) => {
    const target = path.resolve(dir, r);
    if (!existsSync(target)) throw new Error(`${file}: resource ${r} does not exist`);
    return statSync(target).isDirectory() ? resolveKustomization(target) : loadManifests(target);
  });
}

/** Every document of a YAML file (a document that is only comments is skipped). */
export function loadManifests(file: string): K8sObject[] {
  return parseAllDocuments(readFileSync(file, "utf8")).flatMap((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]?.message}`);
    const value = doc.toJS() as K8sObject | null;
    return value === null ? [] : [value];
  });
}

/** `kubectl kustomize dir` when kubectl is installed (it embeds kustomize); undefined otherwise. */
export function kubectlKustomize(dir: string): { status: number | null; output: string } | undefined {
  const probe = spawnSync("kubectl", ["version", "--client"], { encoding: "utf8" });
  if (probe.status !== 0) return undefined;
  const r = spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
  return { status: r.status, output: r.status === 0 ? r.stdout : r.stderr };
}
