import { compileComponent } from "../../src/runtime/component/compile.js";
import { Sandbox } from "../../src/runtime/sandbox/sandbox.js";

/**
 * A child process for sandbox tests whose failure mode is a crash of the whole process (see
 * spawnScript in process.ts): runs the component in `COMPONENT_CODE` once with a time limit of
 * `SANDBOX_TIMEOUT_MS`, then a healthy component in the same sandbox, and prints one JSON line
 * `{"verdict": {code, msg} | null, "emits": [...], "after": [...]}`.
 */

const HEALTHY = `module.exports = { name: "ok", async run() { this.$emit("still serving"); } };`;

async function main(): Promise<void> {
  const code = process.env.COMPONENT_CODE ?? "";
  const sandbox = new Sandbox({ memoryMb: 64, timeoutMs: Number(process.env.SANDBOX_TIMEOUT_MS ?? 10_000) });
  try {
    const run = async (source: string) =>
      sandbox.run({
        compiledCode: await compileComponent(source, { allowedPackages: [] }),
        sourceId: "dc_child",
        method: "run",
        props: {},
        db: {},
      });
    const hostile = await run(code);
    const after = await run(HEALTHY);
    const verdict = hostile.error ? { code: hostile.error.code, msg: hostile.error.msg } : null;
    process.stdout.write(
      `${JSON.stringify({ verdict, emits: hostile.emits.map((e) => e.event), after: after.emits.map((e) => e.event) })}\n`,
    );
  } finally {
    sandbox.close();
  }
}

await main();
