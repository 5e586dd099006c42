/** Config tests of one model's field: a file of one approximate-mode model with the given lines added to it. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadGatewayConfig } from '../../src/config/index.js';

/** A loader writing into a fresh temporary directory named after `name`; `remove()` deletes it. */
export function oneModelConfig(name: string): {
  load(lines: readonly string[]): ReturnType<typeof loadGatewayConfig>;
  remove(): void;
} {
  const dir = mkdtempSync(join(tmpdir(), `kvgate-${name}-`));
  return {
    load(lines) {
      const file = join(dir, 'kvgate.yaml');
      const model = ['models:', '  - name: m', '    workers: [{ id: 1, url: "http://127.0.0.1:9001" }]'];
      writeFileSync(
        file,
        [...model, '    router: { use_kv_events: false }', ...lines.map((l) => `    ${l}`), ''].join('\n'),
      );
      return loadGatewayConfig({ file, env: {} });
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
