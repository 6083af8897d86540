import { describe, expect, it } from "vitest";
import { isPlainJsonType } from "../../../../src/api/middleware/body.js";

describe("isPlainJsonType (the fast path before type-is)", () => {
  it.each([
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON;charset=UTF-8",
    "  application/json  ",
    "application/vnd.api+json",
    "application/merge-patch+json; charset=utf-8",
  ])("recognises %j", (header) => {
    expect(isPlainJsonType(header)).toBe(true);
  });

  it.each([
    "",
    "text/plain",
    "application/jsonx",
    "application/json/x",
    "text/json",
    "application/+json",
    "json",
    "application/x-www-form-urlencoded",
  ])("leaves %j to type-is", (header) => {
    expect(isPlainJsonType(header)).toBe(false);
  });
});
