import { describe, expect, it } from "vitest";
import { lowerCaseHeaders, parseBody } from "../../../src/runtime/http-request.js";

describe("parseBody", () => {
  const FORM = "application/x-www-form-urlencoded";

  it("turns form fields named like Object members into plain data", () => {
    const form = parseBody("constructor=a&toString=b&__proto__=c&valueOf=d", FORM) as Record<string, unknown>;
    expect(Object.getPrototypeOf(form)).toBeNull();
    expect(Object.keys(form)).toEqual(["constructor", "toString", "__proto__", "valueOf"]);
    expect(JSON.stringify(form)).toBe('{"constructor":"a","toString":"b","__proto__":"c","valueOf":"d"}');
    expect(structuredClone(form)).toEqual(JSON.parse(JSON.stringify(form)));
  });

  it("makes repeated form keys arrays, a repeated constructor included", () => {
    expect(JSON.stringify(parseBody("x=1&constructor=a&x=2&constructor=b&x=3", FORM))).toBe('{"x":["1","2","3"],"constructor":["a","b"]}');
  });

  it("parses JSON, and gives text for JSON nested too deep", () => {
    expect(parseBody('{"n":1}', "application/json")).toEqual({ n: 1 });
    const deep = `${"[".repeat(300)}${"]".repeat(300)}`;
    expect(parseBody(deep, "application/json")).toBe(deep);
  });
});

describe("lowerCaseHeaders", () => {
  it("keeps a header named __proto__ as a header", () => {
    // Node's parser gives headers as own properties, `__proto__` included, as JSON.parse does.
    const headers = lowerCaseHeaders(JSON.parse('{"X-A":"1","__proto__":"p"}'));
    expect(JSON.stringify(headers)).toBe('{"x-a":"1","__proto__":"p"}');
  });
});
