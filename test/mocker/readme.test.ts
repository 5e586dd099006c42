/** The README's `kvgate mocker` section stays true: every flag documented, the example's claim holds. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MOCKER_HELP as HELP } from '../../src/cli/mocker.js';
import { startMocker } from '../../src/mocker/index.js';
import { postJson } from './helpers.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const section = readme.slice(
  readme.indexOf('## kvgate mocker'),
  readme.indexOf('\n## ', readme.indexOf('## kvgate mocker') + 5),
);

describe('README: kvgate mocker', () => {
  it('documents every flag of `kvgate mocker --help`', () => {
    expect(section.length).toBeGreaterThan(1000);
    const flags = [...HELP.matchAll(/^\s+(--[a-z-]+)/gm)].map((m) => m[1]!).filter((f) => f !== '--help');
    expect(flags.length).toBeGreaterThan(30);
    for (const flag of flags) expect(section, flag).toContain(flag);
  });

  it('the pasteable example reports what it says', async () => {
    const body = /-d '(\{"prompt".*?\})'/.exec(section)![1]!;
    expect(section).toContain('"cached_tokens":16');
    const m = await startMocker({ speedup: 10, kvEvents: false });
    try {
      const first = await postJson(`${m.url}/v1/completions`, body);
      const second = await postJson(`${m.url}/v1/completions`, body);
      expect(first.json.usage.prompt_tokens_details.cached_tokens).toBe(0);
      expect(second.json.usage.prompt_tokens_details.cached_tokens).toBe(16);
    } finally {
      await m.close();
    }
  });
});
