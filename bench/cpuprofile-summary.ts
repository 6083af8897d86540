/**
 * Self time of a V8 CPU profile (BENCH_CPU_PROF writes one per daemon) per function, file or
 * package, to compare two daemons of a run (docs/performance.md "Redis Cluster"):
 *
 *   npx tsx bench/cpuprofile-summary.ts <file.cpuprofile> [fn|file|pkg] [top]
 *
 * V8 samples wall time: a process descheduled on a busy host is charged to the frame it was in
 * (often a socket write), so compare CPU time with `perf` when the host is shared.
 */
import { readFileSync } from "node:fs";

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
}
interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const [file, mode = "fn", top = "40"] = process.argv.slice(2);
if (!file) {
  console.error("usage: cpuprofile-summary <file.cpuprofile> [fn|file|pkg] [top]");
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;

/** µs per node id. */
const self = new Map<number, number>();
profile.samples.forEach((id, i) => {
  self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
});

const short = (url: string) =>
  url
    .replace(/^file:\/\//, "")
    .replace(/.*node_modules\//, "nm/")
    .replace(/.*\/(src|bench|test)\//, "$1/");

function keyOf(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const u = short(url);
  if (mode === "file") return u || functionName;
  if (mode === "pkg") {
    if (u.startsWith("nm/")) {
      const parts = u.split("/");
      return parts.slice(0, parts[1]?.startsWith("@") ? 3 : 2).join("/");
    }
    if (u.startsWith("src/")) return `src/${u.split("/")[1]}`;
    if (u.startsWith("node:")) return "node:*";
    return u || functionName || "(native)";
  }
  return `${functionName || "(anonymous)"} ${u}:${lineNumber}`;
}

const totals = new Map<string, number>();
let all = 0;
for (const node of profile.nodes) {
  const t = self.get(node.id) ?? 0;
  if (t === 0) continue;
  all += t;
  const k = keyOf(node);
  totals.set(k, (totals.get(k) ?? 0) + t);
}
console.log(`total ${(all / 1e6).toFixed(2)} s`);
for (const [k, t] of [...totals].sort((a, b) => b[1] - a[1]).slice(0, Number(top))) {
  console.log(`${(t / 1000).toFixed(0).padStart(7)} ms ${((100 * t) / all).toFixed(1).padStart(5)} %  ${k}`);
}
