/** Deepest JSON nesting accepted anywhere (bodies, emitted events). Deeper values would overflow
 * the stack when serialised; Pipedream payloads are nowhere near it. */
export const MAX_JSON_DEPTH = 256;

/** True when `value` nests objects/arrays deeper than `max`. Iterative, so it cannot overflow itself. */
export function exceedsDepth(value: unknown, max = MAX_JSON_DEPTH): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== "object") continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
  }
  return false;
}
