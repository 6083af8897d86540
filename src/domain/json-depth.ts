/** Deepest JSON nesting accepted anywhere (bodies, emitted events). Deeper values would overflow
 * the stack when serialised; Pipedream payloads are nowhere near it. */
export const MAX_JSON_DEPTH = 256;

/**
 * True when `value` nests objects/arrays deeper than `max` (the value itself is level 1). The
 * recursion stops at `max` levels, so it cannot overflow the stack itself; it allocates nothing
 * (an emit's body used to cost 80–220 ns here, a 20-item event 4–8 µs: a tuple per node and an
 * array of each object's values; now 30–40 ns and 1.2 µs).
 */
export function exceedsDepth(value: unknown, max = MAX_JSON_DEPTH): boolean {
  return value !== null && typeof value === "object" && deeper(value, max);
}

/** True when `v` (an object or array with `left` levels allowed, itself included) nests deeper. */
function deeper(v: object, left: number): boolean {
  if (left === 0) return true;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const child: unknown = v[i];
      if (child !== null && typeof child === "object" && deeper(child, left - 1)) return true;
    }
    return false;
  }
  for (const key in v) {
    const child: unknown = (v as Record<string, unknown>)[key];
    if (child !== null && typeof child === "object" && deeper(child, left - 1)) return true;
  }
  return false;
}
