import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The version in package.json (found by walking up from this file). A leaf any layer may use. */
export function kvgateVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'kvgate' && pkg.version) return pkg.version;
    } catch {
      // not here; keep walking up
    }
    dir = dirname(dir);
  }
  return '0.0.0';
}
