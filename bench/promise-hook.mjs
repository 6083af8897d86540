// Preloaded into a daemon by bench/promises-per-emit.ts (`node --import`): SIGUSR2 starts counting
// the promises the process creates (an async_hooks init hook), the next SIGUSR2 stops and writes
// /tmp/tributary-promises-<pid>.json: the count and, for every 7th promise, where it was made.
import { createHook } from "node:async_hooks";
import { writeFileSync } from "node:fs";

let counting = false;
let count = 0;
const sites = new Map();
createHook({
  init(_id, type) {
    if (!counting || type !== "PROMISE") return;
    count++;
    if (count % 7 !== 0) return;
    const frames = (new Error().stack ?? "")
      .split("\n")
      .slice(5, 9)
      .map((l) => l.trim().replace(/\(?file:\/\/\/\S*?\/(dist|node_modules)\//, "$1/"));
    const site = frames.join(" < ");
    sites.set(site, (sites.get(site) ?? 0) + 1);
  },
}).enable();
process.on("SIGUSR2", () => {
  if (!counting) {
    counting = true;
    count = 0;
    sites.clear();
    return;
  }
  counting = false;
  const top = [...sites]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 40)
    .map(([site, n]) => [site, n * 7]);
  writeFileSync(`/tmp/tributary-promises-${process.pid}.json`, JSON.stringify({ count, sites: top }));
});
