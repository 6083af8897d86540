import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { startTestDaemon } from "./daemon.js";

/**
 * What the deploy/ tests need of Prometheus: the series the daemon really exposes (scraped from a
 * running daemon, never a written list), the metric names a PromQL expression reads, and promtool.
 */

/** Series names a daemon with every role exposes on /metrics: histograms as _bucket, _sum, _count. */
export async function scrapeExposedSeries(): Promise<Set<string>> {
  const td = await startTestDaemon();
  try {
    const text = await (await fetch(`${td.url}/metrics`)).text();
    return seriesOfExposition(text);
  } finally {
    await td.close();
  }
}

/** The series names of a Prometheus text exposition, from its `# TYPE` lines. */
export function seriesOfExposition(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    if (type === "histogram") for (const s of ["_bucket", "_sum", "_count"]) names.add(name + s);
    else if (type === "summary") for (const s of ["", "_sum", "_count"]) names.add(name + s);
    else names.add(name);
  }
  return names;
}

const KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "inf",
  "nan",
]);

/**
 * The metric names a PromQL expression reads: identifiers that are not functions, aggregations,
 * keywords, label names (inside `{}` or the parentheses of by/without/on/ignoring/group_*) or
 * strings. Enough for the expressions of deploy/; not a PromQL parser (promtool checks syntax).
 */
export function metricNamesIn(expr: string): Set<string> {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  const names = new Set<string>();
  for (const m of stripped.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const word = m[0];
    const after = stripped.slice((m.index ?? 0) + word.length).trimStart();
    if (after.startsWith("(")) continue; // a function or an aggregation
    if (KEYWORDS.has(word.toLowerCase())) continue;
    if (/^\d/.test(word)) continue;
    // A duration or number suffix glued to digits (`5m`, `1e3`) never starts a name here.
    const before = stripped[(m.index ?? 0) - 1];
    if (before !== undefined && /[0-9.]/.test(before)) continue;
    names.add(word);
  }
  return names;
}

/** Series Prometheus itself writes for every scrape target (not the daemon's). */
export const SCRAPE_SERIES = new Set(["up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added"]);

/** promtool's path, or undefined when it is not installed. */
export function promtool(): string | undefined {
  const r = spawnSync("promtool", ["--version"], { encoding: "utf8" });
  return r.status === 0 ? "promtool" : undefined;
}

/** Runs promtool; returns its exit status and output (never throws on a non-zero exit). */
export function runPromtool(args: readonly string[], cwd?: string): { status: number | null; output: string } {
  const r = spawnSync("promtool", args, { encoding: "utf8", cwd });
  return { status: r.status, output: `${r.stdout ?? ""}${r.stderr ?? ""}` };
}

/**
 * Asks promtool to parse each expression: they become recording rules of a temporary rule file and
 * `promtool check rules` parses them (promtool of Debian 12 has no `promql` command). Returns its
 * exit status and output.
 */
export function checkExpressions(exprs: readonly string[]): { status: number | null; output: string } {
  const dir = mkdtempSync(path.join(tmpdir(), "tributary-promql-"));
  try {
    const rules = exprs.map((e, i) => ({ record: `tributary_dashboard:expr_${i}`, expr: e }));
    // JSON is YAML: no quoting rules to get wrong.
    writeFileSync(path.join(dir, "rules.yml"), JSON.stringify({ groups: [{ name: "dashboard", rules }] }));
    return runPromtool(["check", "rules", path.join(dir, "rules.yml")]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
