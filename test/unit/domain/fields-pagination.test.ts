import { describe, expect, it } from "vitest";
import { applyFieldFilter, parseFieldFilter } from "../../../src/domain/fields.js";
import { pageInfo, pageRange, parseLimit, parsePageRequest } from "../../../src/domain/pagination.js";
import { ValidationError } from "../../../src/domain/errors.js";

describe("include / exclude", () => {
  const item = { id: "dc_1", name: "n", active: true, configured_props: {} };
  it("includes first, then excludes, ignoring unknown names", () => {
    expect(applyFieldFilter(item, parseFieldFilter("id,name,nope", undefined))).toEqual({ id: "dc_1", name: "n" });
    expect(applyFieldFilter(item, parseFieldFilter(undefined, "name,configured_props"))).toEqual({ id: "dc_1", active: true });
    expect(applyFieldFilter(item, parseFieldFilter("id,name,active", "name"))).toEqual({ id: "dc_1", active: true });
  });
  it("leaves the item alone without a usable list", () => {
    expect(applyFieldFilter(item, parseFieldFilter("", ","))).toBe(item);
    expect(applyFieldFilter(item, parseFieldFilter(42, ["x"]))).toBe(item);
  });
});

describe("limit", () => {
  it("defaults to 10 and accepts 1..100", () => {
    expect(parseLimit(undefined)).toBe(10);
    expect(parseLimit("1")).toBe(1);
    expect(parseLimit("100")).toBe(100);
    expect(parseLimit(50)).toBe(50);
  });
  it.each(["0", "101", "abc", "-3", "1.5", "1e2", " ", "NaN"])("rejects %j with a 400 naming limit", (raw) => {
    expect(() => parseLimit(raw)).toThrowError(ValidationError);
    expect(() => parseLimit(raw)).toThrowError(/limit/);
  });
  it("refuses after and before together", () => {
    expect(() => parsePageRequest({ after: "a", before: "b" })).toThrowError(/either/);
  });
});

describe("page ranges over a newest-first list", () => {
  it("starts at the top without a cursor", () => {
    expect(pageRange({ limit: 10 })).toEqual({ start: 0, stop: 9 });
  });
  it("after rank r returns what follows r", () => {
    expect(pageRange({ limit: 2 }, { rank: 1, direction: "after" })).toEqual({ start: 2, stop: 3 });
  });
  it("before rank r returns the closest items before r", () => {
    expect(pageRange({ limit: 10 }, { rank: 3, direction: "before" })).toEqual({ start: 0, stop: 2 });
    expect(pageRange({ limit: 2 }, { rank: 5, direction: "before" })).toEqual({ start: 3, stop: 4 });
    expect(pageRange({ limit: 2 }, { rank: 0, direction: "before" })).toEqual({ start: 0, stop: -1 });
  });
  it("page_info cursors are null on an empty page", () => {
    expect(pageInfo([], 7, (x: string) => x)).toEqual({ total_count: 7, count: 0, start_cursor: null, end_cursor: null });
    expect(pageInfo(["a", "b"], 2, (x) => x.toUpperCase())).toEqual({ total_count: 2, count: 2, start_cursor: "A", end_cursor: "B" });
  });
});
