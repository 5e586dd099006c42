import { isKvgateError, type KvgateError } from '../../src/errors/index.js';

/** The KvgateError that `fn` throws; fails the test if it returns or throws anything else. */
export function kvgateErrorOf(fn: () => unknown): KvgateError {
  try {
    fn();
  } catch (err) {
    if (isKvgateError(err)) return err;
    throw err;
  }
  throw new Error('expected a KvgateError');
}
