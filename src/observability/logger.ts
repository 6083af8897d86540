import { createRequire } from "node:module";
import { pino, type Logger } from "pino";

export type { Logger };

export type LogFormat = "json" | "pretty";

/** The package LOG_FORMAT=pretty hands lines to (pino's own pretty printer, in a worker thread). */
export const PRETTY_PRINTER = "pino-pretty";

/** Whether the pretty printer can be loaded from here (it is an optional install). */
export function prettyPrinterInstalled(): boolean {
  try {
    createRequire(import.meta.url).resolve(PRETTY_PRINTER);
    return true;
  } catch {
    return false;
  }
}

/**
 * The process logger. Tests pass level "silent". `pretty` writes pino-pretty's lines to stdout;
 * without the package it writes JSON and says so once on stderr (a missing nicety must not stop
 * the daemon).
 */
export function createLogger(level: string, base: Record<string, unknown> = {}, format: LogFormat = "json"): Logger {
  const options = { level, base: { service: "tributary", ...base }, timestamp: pino.stdTimeFunctions.isoTime };
  if (format === "pretty") {
    if (prettyPrinterInstalled()) {
      return pino({
        ...options,
        transport: { target: PRETTY_PRINTER, options: { colorize: process.stdout.isTTY === true, ignore: "service,pid,hostname" } },
      });
    }
    process.stderr.write(
      `tributary: LOG_FORMAT=pretty needs the ${PRETTY_PRINTER} package (npm install ${PRETTY_PRINTER}); logging JSON\n`,
    );
  }
  return pino(options);
}
