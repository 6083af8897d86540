import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";

/**
 * The product's docs hold together: every relative link in README.md and docs/ names a file that
 * exists (and a heading of it, when it has a #fragment), the docs speak to users about the product
 * (no development journal: no work rounds, issue numbers or the project's internal contract), and
 * the operating guide's alert table lists every alert of deploy/prometheus/alerts.yml.
 */

const ROOT = path.resolve(import.meta.dirname, "../../..");

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}
const markdownUnder = (dir: string) => filesUnder(dir).filter((f) => f.endsWith(".md"));

const DOCS = [path.join(ROOT, "README.md"), ...markdownUnder(path.join(ROOT, "docs")), ...markdownUnder(path.join(ROOT, "deploy"))];

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, "utf8").replace(/^```[\s\S]*?^```/gm, "");
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchorOf(m[1] ?? "")));
}

/** Relative links `[text](target)` outside code blocks and code spans. */
function linksOf(file: string): string[] {
  const text = readFileSync(file, "utf8")
    .replace(/^ *```[\s\S]*?^ *```/gm, "")
    .replace(/`[^`\n]*`/g, "");
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] ?? "").filter((t) => !/^[a-z]+:/.test(t));
}

/** Where a link in `file` points, or why it does not. */
function brokenLink(file: string, target: string): string | undefined {
  const [rel = "", fragment] = target.split("#");
  const dest = rel === "" ? file : path.resolve(path.dirname(file), rel);
  if (!existsSync(dest)) return `${target}: no such file`;
  if (fragment && dest.endsWith(".md") && !anchorsOf(dest).has(fragment)) return `${target}: no heading #${fragment}`;
  return undefined;
}

describe("the docs", () => {
  it("are found (README, the guide, the reference pages)", () => {
    const names = DOCS.map((f) => path.relative(ROOT, f));
    expect(names).toEqual(
      expect.arrayContaining([
        "README.md",
        "docs/decisions.md",
        "docs/security.md",
        "docs/performance.md",
        "docs/guide/getting-started.md",
        "docs/guide/writing-sources.md",
        "docs/guide/delivery.md",
        "docs/guide/operating.md",
        "docs/guide/scaling-out.md",
        "docs/guide/troubleshooting.md",
      ]),
    );
  });

  it("link only to files and headings that exist", () => {
    const broken = DOCS.flatMap((f) =>
      linksOf(f)
        .flatMap((t) => brokenLink(f, t) ?? [])
        .map((why) => `${path.relative(ROOT, f)}: ${why}`),
    );
    expect(broken).toEqual([]);
    expect(DOCS.reduce((n, f) => n + linksOf(f).length, 0)).toBeGreaterThan(20);
  });

  it("find a broken link and a missing heading", () => {
    const readme = path.join(ROOT, "README.md");
    expect(brokenLink(readme, "docs/no-such-page.md")).toMatch(/no such file/);
    expect(brokenLink(readme, "docs/guide/delivery.md#no-such-heading")).toMatch(/no heading/);
    expect(brokenLink(readme, "docs/guide/delivery.md#circuit-breaker")).toBeUndefined();
  });

  it("speak of the product, not of its development", () => {
    const files = [path.join(ROOT, "README.md"), ...["docs", "deploy", "config"].flatMap((d) => filesUnder(path.join(ROOT, d)))];
    const journal = /\.\.\/shared|SPEC §|\bissue [0-9]+|\b(first|second|third|[a-z]+th) session\b|red-team/i;
    const found = files.flatMap((f) =>
      readFileSync(f, "utf8")
        .split("\n")
        .flatMap((line, i) => (journal.test(line) ? [`${path.relative(ROOT, f)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(found).toEqual([]);
  });

  it("list every alert of deploy/prometheus/alerts.yml in the operating guide", () => {
    const rules = parseYaml(readFileSync(path.join(ROOT, "deploy/prometheus/alerts.yml"), "utf8")) as {
      groups: { rules: { alert?: string }[] }[];
    };
    const alerts = rules.groups.flatMap((g) => g.rules.flatMap((r) => r.alert ?? []));
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    const guide = readFileSync(path.join(ROOT, "docs/guide/operating.md"), "utf8");
    const rows = new Set([...guide.matchAll(/^\| `(Tributary\w+)`/gm)].map((m) => m[1]));
    expect(alerts.filter((a) => !rows.has(a))).toEqual([]);
    expect([...rows].filter((r) => !alerts.includes(r ?? ""))).toEqual([]);
  });
});
