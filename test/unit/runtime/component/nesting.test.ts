import { describe, expect, it } from "vitest";
import { bracketDepth, MAX_NESTING } from "../../../../src/runtime/component/nesting.js";

describe("bracketDepth", () => {
  it("counts parentheses, brackets, braces and template substitutions", () => {
    expect(bracketDepth("")).toBe(0);
    expect(bracketDepth("a + b")).toBe(0);
    expect(bracketDepth("f(a[0], { b: [1] })")).toBe(3);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: component source text with a template literal in it
    expect(bracketDepth("`x ${ f(`y ${ [z] }`) } w`")).toBe(4);
    expect(bracketDepth("module.exports = { run() { return [[[1]]]; } };")).toBe(5);
  });

  it("ignores brackets in strings, comments, template text and regular expressions", () => {
    expect(bracketDepth(`"[[[(" + '{{{' + \`((( \\\` [[\``)).toBe(0);
    expect(bracketDepth("// [[[[\n/* (((( */ x")).toBe(0);
    expect(bracketDepth("s.replace(/[(\\[{/]/g, '')")).toBe(1);
    expect(bracketDepth("if (a) return /[[[[/.test(b)")).toBe(1);
    expect(bracketDepth("x = a / (b) / [c]")).toBe(1);
  });

  it("tells a template's closing brace from a block's", () => {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: component source text with a template literal in it
    expect(bracketDepth("`${a}` + { b: `${ {c: 1} }` }")).toBe(3);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: component source text with a template literal in it
    expect(bracketDepth("`a${1}b${[2]}c` / 2")).toBe(2);
  });

  it("ignores closers without an opener", () => {
    expect(bracketDepth(")))]]]}}} (x)")).toBe(1);
  });

  it("stops counting past the limit", () => {
    const deep = `module.exports = { run() { return ${"[".repeat(250_000)}${"]".repeat(250_000)} } }`;
    expect(bracketDepth(deep)).toBe(MAX_NESTING + 1);
    expect(bracketDepth("(".repeat(50), 10)).toBe(11);
  });

  it("measures ordinary component code far below the limit", () => {
    const code = `import { axios } from "@pipedream/platform";
export default {
  name: "Feed", props: { db: "$.service.db", timer: { type: "$.interface.timer", default: { intervalSeconds: 60 } } },
  async run() {
    const items = (await axios(this, { url: \`https://x/\${encodeURIComponent(this.q)}\` })).items ?? [];
    for (const i of items.filter((x) => /^[a-z]+$/.test(x.id))) this.$emit(i, { id: i.id, summary: \`\${i.title} (\${i.id})\` });
  },
};`;
    expect(bracketDepth(code)).toBeLessThan(10);
  });
});
