/**
 * What the process retains: the JS heap plus ArrayBuffer backing stores (token arrays live outside the heap),
 * read after full collections. Without them a reading includes garbage not yet collected, which moves by tens
 * of MB between runs with the machine's load, so a bound on growth fails at random.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

export function retainedBytes(): number {
  for (let i = 0; i < 3; i++) gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}
