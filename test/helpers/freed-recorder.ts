/** A `BookkeepingObserver` that records the ids it is told were freed, and ignores the rest. */
import type { BookkeepingObserver } from '../../src/core/index.js';

export function freedRecorder(): { observer: BookkeepingObserver; freed: string[] } {
  const freed: string[] = [];
  const observer: BookkeepingObserver = {
    added: () => undefined,
    prefillCompleted: () => undefined,
    outputBlock: () => undefined,
    freed: (id) => void freed.push(id),
  };
  return { observer, freed };
}
