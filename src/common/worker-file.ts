/**
 * Where the compiled entry of a worker thread is: `dist/workers/<name>.js`, whether the module asking runs
 * built (from dist/src/) or from its sources (src/, under vitest). Entries are loaded by path, so they must
 * be built first.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KvgateError } from '../errors/index.js';

/**
 * @param moduleUrl the asking module's `import.meta.url`, in a folder `depth` levels below src/.
 * @param name the entry's file name without extension (`kv-ingest`).
 * @throws KvgateError KVG_ERR_INTERNAL when the entry has not been built.
 */
export function workerEntryFile(moduleUrl: string, name: string, depth: number): string {
  const up = '../'.repeat(depth + 1);
  const here = dirname(fileURLToPath(moduleUrl));
  // Built: dist/src/<folder>/ -> dist/workers/. Sources: src/<folder>/ -> dist/workers/.
  const built = resolve(here, `${up}workers/${name}.js`);
  if (moduleUrl.endsWith('.js') && existsSync(built)) return built;
  const fromSource = resolve(here, `${up}dist/workers/${name}.js`);
  if (existsSync(fromSource)) return fromSource;
  throw new KvgateError(
    'KVG_ERR_INTERNAL',
    `cannot find the compiled worker thread ${name} (${built} or ${fromSource}); run \`npm run build\` first`,
  );
}
