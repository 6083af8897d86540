import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/helpers/global-setup.ts"],
    pool: "forks",
    // isolated-vm needs this flag on Node 20+.
    execArgv: ["--no-node-snapshot"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    fileParallelism: true,
    maxWorkers: 2,
    // vitest's own output (and its closing summary) plus a files-done count when not on a terminal.
    reporters: ["default", "./test/helpers/progress-reporter.ts"],
  },
});
