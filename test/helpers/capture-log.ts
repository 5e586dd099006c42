/**
 * A common `Logger` that keeps the fields of every warn line (the level the
 * event and routing layers report problems at) for a test to read.
 */
import { silentLogger, type Logger } from '../../src/common/index.js';

export function captureWarnings(lines: Record<string, unknown>[]): Logger {
  const log: Logger = { ...silentLogger, warn: (fields) => lines.push(fields), child: () => log };
  return log;
}
