/**
 * The one logging interface every layer writes to. A pino `Logger` satisfies
 * it; the CLI owns the pino instance and hands it down in the `Context`, so
 * no layer creates a logger of its own. Fields first, message second, as pino.
 */
export interface Logger {
  error(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  info(fields: Record<string, unknown>, msg: string): void;
  debug(fields: Record<string, unknown>, msg: string): void;
  /** A logger whose lines also carry `fields` (pino's `child`). */
  child(fields: Record<string, unknown>): Logger;
  /** Whether lines of `level` are written (pino's): a caller skips building a line nobody reads. */
  isLevelEnabled?(level: 'debug'): boolean;
}

const noop = (): void => {};

/** Drops every line: the default for library use and tests that do not read logs. */
export const silentLogger: Logger = {
  error: noop,
  warn: noop,
  info: noop,
  debug: noop,
  child: () => silentLogger,
  isLevelEnabled: () => false,
};
