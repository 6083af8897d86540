import { readFileSync } from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { checkExpressions, metricNamesIn, promtool, SCRAPE_SERIES, scrapeExposedSeries } from "../../helpers/promql.js";

/**
 * deploy/grafana/tributary.json (SPEC §11): every query reads only series a running daemon
 * exposes, promtool parses every query, every tributary_ metric is on some panel, and no data source
 * is tied to a host: panels name `${DS_PROMETHEUS}`.
 */

const FILE = path.resolve(import.meta.dirname, "../../../deploy/grafana/tributary.json");
const raw = readFileSync(FILE, "utf8");
/** Grafana's reference to the data source variable (a literal `${…}`, not a template). */
const DS_REF = ["$", "{DS_PROMETHEUS}"].join("");

interface Target {
  expr?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  title: string;
  type: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  panels?: Panel[];
}
interface Variable {
  name: string;
  type: string;
  query?: unknown;
  datasource?: { uid?: string };
}
const dashboard = JSON.parse(raw) as { panels: Panel[]; templating: { list: Variable[] }; __inputs?: { name: string }[] };

const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const queryPanels = panels.filter((p) => p.type !== "row");
const exprs = queryPanels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr ?? "" })));
/** `label_values(metric, label)` queries of variables read a metric too. */
const variableMetrics = dashboard.templating.list.flatMap((v) => {
  const q = typeof v.query === "string" ? v.query : ((v.query as { query?: string } | undefined)?.query ?? "");
  const m = /label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)/.exec(q);
  return m?.[1] ? [{ variable: v.name, metric: m[1] }] : [];
});

/** Grafana's variables replaced by values PromQL accepts, so promtool can parse the expressions. */
const GRAFANA_VARIABLES: Record<string, string> = { __rate_interval: "5m", __interval: "1m", __range: "1h", job: "tributary" };
function substitute(expr: string): string {
  return expr.replace(/\$\{?(\w+)\}?/g, (whole, name: string) => {
    const value = GRAFANA_VARIABLES[name];
    if (value === undefined) throw new Error(`unknown Grafana variable ${whole} in ${expr}`);
    return value;
  });
}

let exposed: Set<string>;
beforeAll(async () => {
  exposed = await scrapeExposedSeries();
});

describe("deploy/grafana/tributary.json", () => {
  it("has the panels SPEC §11 lists, each with a query", () => {
    const titles = queryPanels.map((p) => p.title);
    for (const t of [
      "Ingest rate",
      "Fan-out",
      "Deliveries by outcome",
      "Delivery attempt duration",
      "Emit to delivered",
      "Queue backlog",
      "Oldest waiting",
      "Source runs by outcome",
      "Sandbox run time",
      "Timer lag",
      "Requests by route and status",
    ])
      expect(titles).toContain(t);
    for (const p of queryPanels) expect(p.targets?.length, p.title).toBeGreaterThan(0);
  });

  it("reads only series the daemon exposes", () => {
    expect(exposed.has("tributary_emit_to_delivered_seconds_bucket")).toBe(true);
    const unknown = [
      ...exprs.flatMap(({ panel, expr }) =>
        [...metricNamesIn(expr)].filter((n) => !exposed.has(n) && !SCRAPE_SERIES.has(n)).map((n) => `${panel}: ${n}`),
      ),
      ...variableMetrics.filter((v) => !exposed.has(v.metric)).map((v) => `$${v.variable}: ${v.metric}`),
    ];
    expect(unknown).toEqual([]);
    for (const { panel, expr } of exprs) expect(metricNamesIn(expr).size, panel).toBeGreaterThan(0);
  });

  it("shows every tributary_ metric the daemon exposes", () => {
    const family = (series: string) => series.replace(/_(bucket|sum|count)$/, "");
    const used = new Set(exprs.flatMap(({ expr }) => [...metricNamesIn(expr)].map(family)));
    const histograms = new Set([...exposed].filter((s) => s.endsWith("_bucket")).map(family));
    const families = new Set(
      [...exposed].filter((s) => s.startsWith("tributary_")).map((s) => (histograms.has(family(s)) ? family(s) : s)),
    );
    expect([...families].filter((f) => !used.has(f))).toEqual([]);
  });

  it("computes latency quantiles with histogram_quantile over _bucket rates by le", () => {
    const quantiles = exprs.filter(({ expr }) => expr.includes("histogram_quantile"));
    expect(quantiles.length).toBeGreaterThanOrEqual(4);
    for (const { panel, expr } of quantiles) expect(expr, panel).toMatch(/histogram_quantile\(0\.\d+, sum by \(le[,)][\s\S]*_bucket\{/);
  });

  it("parses with promtool, every expression", () => {
    const tool = promtool();
    if (!tool && process.env.CI === "true")
      throw new Error("promtool is not installed (apt-get install -y prometheus); CI=true requires it");
    const substituted = exprs.map(({ expr }) => substitute(expr));
    if (!tool) {
      // Without promtool (outside CI): balanced brackets at least.
      for (const e of substituted) for (const [o, c] of ["()", "{}", "[]"]) expect(e.split(o!).length, e).toBe(e.split(c!).length);
      return;
    }
    const r = checkExpressions(substituted);
    expect(r.output).toContain("SUCCESS");
    expect(r.status).toBe(0);
  });

  it("names its data source through the DS_PROMETHEUS variable, never a host", () => {
    expect(dashboard.templating.list.find((v) => v.name === "DS_PROMETHEUS")?.type).toBe("datasource");
    for (const p of queryPanels) {
      expect(p.datasource?.uid, p.title).toBe(DS_REF);
      for (const t of p.targets ?? []) expect(t.datasource?.uid ?? DS_REF, p.title).toBe(DS_REF);
    }
    // No URL of a host anywhere in the file (a data source's url, a link).
    expect(raw).not.toMatch(/https?:\/\//);
  });
});
