import { pino, type Logger } from "pino";

export type { Logger };

/** The process logger. Tests pass level "silent". */
export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino({ level, base: { service: "tributary", ...base }, timestamp: pino.stdTimeFunctions.isoTime });
}
