#!/usr/bin/env -S node --no-node-snapshot
import { runCli } from "./run.js";

// --no-node-snapshot (in the shebang): `users delete` runs deactivate hooks in isolated-vm,
// which needs it on Node 20+. The flag is only honoured by `env -S` (coreutils 8.30+, macOS).
runCli(process.argv.slice(2), process.env, {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
}).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`tributary: ${String((err as Error)?.message ?? err)}\n`);
    process.exit(1);
  },
);
