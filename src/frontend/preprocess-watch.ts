/**
 * What the gateway hears from its preprocessor: tasks dropped from a thread's
 * queue (counted), threads lost and replaced (logged and counted).
 */
import type { Logger } from '../common/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { Preprocessor } from './preprocess/preprocessor.js';

export function watchPreprocessor(preprocessor: Preprocessor, metrics: KvgateMetrics, logger: Logger): void {
  // Preprocessing tasks its requests' signals dropped from a thread's queue (the client left, a deadline).
  preprocessor.onCancelled = (task) => metrics.preprocessTasksCancelled.inc({ task });
  preprocessor.onThreadLost = (reason, { task, err }) => {
    metrics.preprocessThreadsLost.inc({ reason });
    const msg =
      reason === 'timeout'
        ? 'preprocessing thread replaced: a task ran past the time bound'
        : 'preprocessing thread replaced: it died';
    logger.error({ reason, task, err }, msg);
  };
}
