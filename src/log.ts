import { pino, type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * One root logger per process, JSON lines on stdout for journald. Components get
 * `log.child({ component })`; refusals go at warn with `{ code, home, op }`.
 * File contents never go into a log line.
 */
export function createRootLogger(level: LevelWithSilent = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}
