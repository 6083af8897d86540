import { Sandbox } from "../../src/runtime/sandbox/sandbox.js";

/**
 * A child process for sandbox tests whose failure mode is a crash of the whole process (see
 * spawnScript in process.ts): runs each snippet of the JSON array `SNIPPETS` as the body of a
 * component's `run()` in one sandbox (`SANDBOX_MEMORY_MB`, default 64; `SANDBOX_TIMEOUT_MS`,
 * default 10 000), emitting what the snippet returns, then a healthy run, and prints one JSON line
 * `{"verdicts": [{code, msg} | {value}], "after": [...]}`. A snippet that crashes the process
 * shows as the child's exit signal, never as a verdict.
 */

const HEALTHY = `module.exports = { name: "ok", async run() { this.$emit("still serving"); } };`;

async function main(): Promise<void> {
  const snippets = JSON.parse(process.env.SNIPPETS ?? "[]") as string[];
  const sandbox = new Sandbox(
    { memoryMb: Number(process.env.SANDBOX_MEMORY_MB ?? 64), timeoutMs: Number(process.env.SANDBOX_TIMEOUT_MS ?? 10_000) },
    {
      onCatastrophicError: (message) => {
        process.stderr.write(`catastrophic: ${message}\n`);
        process.abort();
      },
    },
  );
  const run = (compiledCode: string) => sandbox.run({ compiledCode, sourceId: "dc_batch", method: "run", props: {}, db: {} });
  try {
    const verdicts: unknown[] = [];
    for (const snippet of snippets) {
      const r = await run(`module.exports = { name: "batch", async run() { this.$emit(await (async () => { ${snippet} })()); } };`);
      verdicts.push(r.error ? { code: r.error.code, msg: r.error.msg } : { value: r.emits[0]?.event });
    }
    const after = await run(HEALTHY);
    process.stdout.write(`${JSON.stringify({ verdicts, after: after.emits.map((e) => e.event) })}\n`);
  } finally {
    sandbox.close();
  }
}

await main();
