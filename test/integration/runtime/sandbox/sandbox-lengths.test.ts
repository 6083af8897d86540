import { afterAll, afterEach, describe, expect, it } from "vitest";
import { maxArrayElements } from "../../../../src/runtime/sandbox/guest-lengths.js";
import { Sandbox } from "../../../../src/runtime/sandbox/sandbox.js";
import { killAll, spawnScript } from "../../../helpers/process.js";

/**
 * The prelude's bound on array lengths (guest-lengths.ts). Without it each snippet below was a V8
 * fatal error or an out-of-memory V8 could not contain (isolated-vm's catastrophic error: the
 * process must end), or a loop in C++ that outlived the run's time limit by minutes; they run in a
 * child process (test/helpers/sandbox-batch-child.ts) so that a regression shows as the child's
 * exit signal instead of taking vitest down. Ordinary use of the same built-ins must not change:
 * that part compares the sandbox's answers with Node's own.
 */

afterEach(killAll);

const LIMIT = maxArrayElements(64);
const BIG = "let s = 'x'; for (let i = 0; i < 28; i++) s += s;";
const LIMITED = new RegExp(`arrays are limited to ${LIMIT} elements in the sandbox`);

interface Verdict {
  code?: string;
  msg?: string;
  value?: unknown;
}

/** Runs each snippet as a run() body in a 64 MB sandbox in a child; the child must exit normally. */
async function runInChild(snippets: string[]): Promise<Verdict[]> {
  const child = spawnScript("sandbox-batch", "test/helpers/sandbox-batch-child.ts", {
    SNIPPETS: JSON.stringify(snippets),
    SANDBOX_MEMORY_MB: "64",
    SANDBOX_TIMEOUT_MS: "20000",
  });
  const exit = await child.exited;
  expect(exit, `the child died:\n${child.logs()}`).toEqual({ code: 0, signal: null });
  const line = child
    .logs()
    .split("\n")
    .find((l) => l.includes('{"verdicts"'));
  if (!line) throw new Error(`no report from the child:\n${child.logs()}`);
  const report = JSON.parse(line.slice(line.indexOf("{"))) as { verdicts: Verdict[]; after: unknown[] };
  expect(report.after).toEqual(["still serving"]);
  return report.verdicts;
}

describe("built-ins asked for an array past the isolate's memory", () => {
  it("refuses them with a RangeError naming the limit, and the process carries on", async () => {
    const cases: [string, RegExp][] = [
      ["return new Array(2e8).fill(1).length", /Array\.prototype\.fill on a length of 200000000/],
      ["const a = []; a.length = 2e8; return a.fill(0).length", /Array\.prototype\.fill/],
      ["class Big extends Array {} return new Big(2e8).fill(1).length", /Array\.prototype\.fill/],
      ["return Object.assign([], { length: 2e8 }).fill(1).length", /Array\.prototype\.fill/],
      ["return Array.prototype.fill.call({ length: 2e8 }, 1).length", /Array\.prototype\.fill/],
      ["const a = [1]; a.length = 2 ** 32 - 1; return a.sort().length", /Array\.prototype\.sort on a length of 4294967295/],
      ["return new Array(2e8).splice(0).length", /Array\.prototype\.splice/],
      ["return new Array(2 ** 32 - 1).indexOf(1)", /Array\.prototype\.indexOf/],
      ["return new Array(2 ** 32 - 1).map((x) => x).length", /Array\.prototype\.map/],
      ["return new Array(2e8).toSorted().length", /Array\.prototype\.toSorted/],
      ["return [].concat(new Array(2e8)).length", /Array\.prototype\.concat on a length of 200000000/],
      ["return [1].concat({ length: 2 ** 40, [Symbol.isConcatSpreadable]: true }).length", /Array\.prototype\.concat/],
      ["return [new Array(2 ** 32 - 1)].flat().length", /Array\.prototype\.flat on a length of 4294967295/],
      ["return Array.from({ length: 2e8 }).length", /Array\.from on a length of 200000000/],
      ["return Array.prototype.map.call('x'.repeat(2 ** 28), (c) => c).length", /Array\.prototype\.map on a length of 268435456/],
    ];
    const verdicts = await runInChild(cases.map(([snippet]) => snippet));
    cases.forEach(([snippet, what], i) => {
      expect(verdicts[i], snippet).toMatchObject({ code: "RangeError", msg: expect.stringMatching(LIMITED) });
      expect(verdicts[i]?.msg, snippet).toMatch(what);
    });
  }, 120_000);

  it("holds when the length answers differently the second time it is read", async () => {
    // A getter, a valueOf, a proxy and a revocable proxy each answer 1 the first time, 2e8 after:
    // the built-in must work on the length that was checked.
    const twoFaced = "let n = 0; const twoFaced = () => (n++ ? 2e8 : 1);";
    const verdicts = await runInChild([
      `${twoFaced} const o = { get length() { return twoFaced(); } }; Array.prototype.fill.call(o, 7); return Object.keys(o).length`,
      `${twoFaced} const o = { length: { valueOf: twoFaced } }; Array.prototype.fill.call(o, 7); return Object.keys(o).length`,
      `${twoFaced} const p = new Proxy([], { get: (t, k) => (k === "length" ? twoFaced() : t[k]) }); p.fill(7); return n`,
      `${twoFaced} const { proxy } = Proxy.revocable([], { get: (t, k) => (k === "length" ? twoFaced() : t[k]) }); proxy.fill(7); return n`,
      `${twoFaced} const o = { get [Symbol.isConcatSpreadable]() { return n++ > 0; }, length: 2 ** 40 }; return [].concat(o).length`,
      `${twoFaced} const o = { get [Symbol.iterator]() { return n++ ? undefined : function* () { yield 1; }; }, length: 2e8 }; return Array.from(o)`,
      `${twoFaced} const a = Array.from({ length: { valueOf: twoFaced } }); return a.length`,
    ]);
    expect(verdicts).toEqual([
      { value: 2 }, // the element "0" and "length"
      { value: 2 },
      { value: 1 },
      { value: 1 },
      { value: 1 },
      { value: [1] },
      { value: 1 },
    ]);
  }, 120_000);

  it("refuses JSON.parse of a text longer than twice the limit, and cuts split and global match", async () => {
    const verdicts = await runInChild([
      `return JSON.parse("[" + "0,".repeat(1.5e8) + "0]").length`,
      `${BIG} return s.split("").length`,
      `${BIG} return s.split(/(?:)/).length`,
      `${BIG} return s.match(/x/g).length`,
      `${BIG} return s.match(/x/).index`,
      `${BIG} return s.split("", 3)`,
    ]);
    expect(verdicts[0]).toEqual({
      code: "RangeError",
      msg: `JSON.parse: the text is 300000003 characters; the sandbox parses at most ${LIMIT * 2}`,
    });
    // Cut one element past the limit and refused, unless the memory limit comes first.
    for (const v of verdicts.slice(1, 4)) {
      if (v.code === "MEMORY_LIMIT") continue;
      expect(v.code).toBe("RangeError");
      expect(v.msg).toMatch(new RegExp(`more than ${LIMIT} (elements|matches)`));
    }
    expect(verdicts[4]).toEqual({ value: 0 });
    expect(verdicts[5]).toEqual({ value: ["x", "x", "x"] });
  }, 120_000);
});

describe("the same built-ins in ordinary use", () => {
  const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: 10_000 });
  afterAll(() => sandbox.close());

  /** Each snippet's answer in the sandbox, as JSON, must be Node's own. */
  const SNIPPETS = [
    "return [1, 2, 3, 4, 5].fill(0, 1, 3)",
    "return new Array(5).fill('x')",
    "return Array.prototype.fill.call({ length: 3 }, 9)",
    "return [1, 2, 3, 4, 5].copyWithin(0, 3)",
    "return [[1, [2]], 'a', null, undefined].join('-')",
    "return [1, [2, 3]].toString() + String([4, [5]])",
    "return [1, 2, NaN, 2].indexOf(2) + [1, 2, NaN, 2].lastIndexOf(2) + Number([NaN].includes(NaN))",
    "return [3, 1, 2].reverse()",
    "return [10, 9, 1, 100].sort()",
    "return [{ k: 2, v: 'a' }, { k: 1, v: 'b' }, { k: 2, v: 'c' }].sort((a, b) => a.k - b.k)",
    "const a = [1, 2, 3, 4]; const r = a.splice(1, 2, 'x', 'y', 'z'); return [a, r]",
    "return [1, 2, 3, 4].slice(-2)",
    "const a = [1, 2, 3]; const s = a.shift(); const u = a.unshift(0, 0.5); return [a, s, u]",
    "return [1, 2, 3].map((x, i, arr) => x * i + arr.length)",
    "return [1, 2, 3, 4].filter((x) => x % 2)",
    "const out = []; [1, , 3].forEach((x, i) => out.push([x, i])); return out",
    "return [[1, 2].some((x) => x > 1), [1, 2].every((x) => x > 1)]",
    "return [[1, 2, 3].reduce((a, b) => a + b), ['a', 'b'].reduceRight((a, b) => a + b, '>')]",
    "return [[1, 2, 3].find((x) => x > 1), [1, 2, 3].findIndex((x) => x > 5), [1, 2, 3].findLast((x) => x < 3), [1, 2, 3].findLastIndex((x) => x < 3)]",
    "return [[1, [2, [3, [4]]]].flat(), [1, [2, [3, [4]]]].flat(Infinity), [1, [2]].flat(0), [1, , [2, , 3]].flat()]",
    "return [1, 2].flatMap((x) => [x, [x * 10]])",
    "return [[3, 1, 2].toSorted(), [1, 2].toReversed(), [1, 2, 3].toSpliced(1, 1, 'x'), [1, 2].with(-1, 9)]",
    "return [1, 2].concat([3, [4]], 5, 'six', { seven: 7 }, { length: 2, 0: 'a', 1: 'b', [Symbol.isConcatSpreadable]: true })",
    "const a = [1]; a[Symbol.isConcatSpreadable] = false; return [0].concat(a).length",
    "class L extends Array {} const l = L.from([1, 2]).concat([3]); return [l instanceof L, l.length, l.map((x) => x).constructor.name]",
    "return [Array.from('héllo'), Array.from(new Set([1, 1, 2])), Array.from({ length: 3 }, (_, i) => i * i), Array.from([1, 2], function (x) { return x + this.d; }, { d: 10 })]",
    "return Array.from({ length: 2, 0: 'a', 1: 'b' })",
    "return JSON.parse('{\"a\":[1,2,{\"b\":null}]}', (k, v) => (typeof v === 'number' ? v * 2 : v))",
    "return JSON.parse(new String('[1]'))",
    "return ['a,b,,c'.split(','), 'a,b,c'.split(',', 2), 'a1b2c'.split(/(\\d)/), 'abc'.split(''), ''.split(','), 'x'.split(undefined)]",
    "return ['abcabc'.match(/b/g), 'abc'.match(/(b)(c)/).slice(), 'abc'.match(/z/g), 'aaa'.match(/a*?/g), '😀😀'.match(/(?:)/gu).length]",
    "return (function () { return Array.prototype.slice.call(arguments, 1); })(1, 2, 3)",
    "return Array.prototype.map.call('abc', (c) => c.toUpperCase())",
    "const p = new Proxy([1, 2, 3], {}); return [p.map((x) => x * 2), Array.isArray(p), p.length, p.concat([4]), [0].concat(p)]",
    "const { proxy, revoke } = Proxy.revocable({}, {}); revoke(); try { proxy.x; return 'no'; } catch (e) { return e.constructor.name; }",
    "try { Proxy({}, {}); return 'no'; } catch (e) { return e.constructor.name; }",
    "return [typeof Proxy, Proxy.name, Proxy.length, Proxy.prototype === undefined, typeof Proxy.revocable]",
    "return [Array.prototype.fill.name, Array.prototype.fill.length, Array.prototype.concat.length, Array.from.length, JSON.parse.length, ''.split.length, RegExp.prototype[Symbol.match].name]",
    "return [Object.keys(Array.prototype).length, Object.getOwnPropertyDescriptor(Array.prototype, 'map').enumerable, 'fill' in Array.prototype[Symbol.unscopables]]",
    "try { new Array.prototype.map(); return 'constructed'; } catch (e) { return e.constructor.name; }",
    "try { Array.prototype.fill.call(null); return 'no'; } catch (e) { return e.constructor.name; }",
    "try { [].concat.call(undefined); return 'no'; } catch (e) { return e.constructor.name; }",
  ];

  it.each(SNIPPETS)("answers as Node does: %s", async (snippet) => {
    const expected = JSON.parse(JSON.stringify(new Function(snippet)()) ?? "null");
    const r = await sandbox.run({
      compiledCode: `module.exports = { name: "same", async run() { this.$emit((() => { ${snippet} })()); } };`,
      sourceId: "dc_same",
      method: "run",
      props: {},
      db: {},
    });
    expect(r.error).toBeUndefined();
    expect(r.emits[0]?.event).toEqual(expected);
  });
});
