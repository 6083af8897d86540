import { describe, expect, it } from "vitest";
import { applyDedupe, UNIQUE_CACHE_SIZE } from "../../../src/domain/dedupe.js";

const e = (id?: string | number) => ({ event: id, meta: id === undefined ? {} : { id } });
const ids = (list: { meta: { id?: string | number } }[]) => list.map((x) => x.meta.id);

describe("dedupe", () => {
  it("unique drops ids seen in this run or earlier runs", () => {
    const a = applyDedupe("unique", [e(1), e(2), e(2), e(3)], {});
    expect(ids(a.kept)).toEqual([1, 2, 3]);
    const b = applyDedupe("unique", [e(3), e(4), e(1)], a.state);
    expect(ids(b.kept)).toEqual([4]);
  });
  it("unique forgets the oldest id after 100", () => {
    let state = {};
    for (let i = 0; i < UNIQUE_CACHE_SIZE + 1; i++) state = applyDedupe("unique", [e(i)], state).state;
    expect(ids(applyDedupe("unique", [e(0)], state).kept)).toEqual([0]);
    expect(ids(applyDedupe("unique", [e(50)], state).kept)).toEqual([]);
  });
  it("greatest keeps only increasing ids, numerically", () => {
    const a = applyDedupe("greatest", [e(5), e(3), e(10), e(9)], {});
    expect(ids(a.kept)).toEqual([5, 10]);
    expect(ids(applyDedupe("greatest", [e("11"), e(2)], a.state).kept)).toEqual(["11"]);
  });
  it("last emits what follows the previously last id, or everything when it is absent", () => {
    const a = applyDedupe("last", [e("a"), e("b"), e("c")], {});
    expect(ids(a.kept)).toEqual(["a", "b", "c"]);
    const b = applyDedupe("last", [e("b"), e("c"), e("d"), e("e")], a.state);
    expect(ids(b.kept)).toEqual(["d", "e"]);
    expect(ids(applyDedupe("last", [e("x"), e("y")], b.state).kept)).toEqual(["x", "y"]);
  });
  it("events without an id always pass, and no strategy keeps everything", () => {
    expect(applyDedupe("unique", [e(), e()], {}).kept).toHaveLength(2);
    expect(applyDedupe(null, [e(1), e(1)], {}).kept).toHaveLength(2);
  });
});
