import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPLAY_HELP as HELP, parseReplayArgs } from '../../src/cli/replay.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf('## kvgate replay'), readme.indexOf('\n## ', readme.indexOf('## kvgate replay') + 5));

/** Splits a shell command line on spaces, honouring single quotes. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let cur = '';
  let quoted = false;
  let inWord = false;
  for (const ch of line) {
    if (ch === "'") {
      quoted = !quoted;
      inWord = true;
    } else if (ch === ' ' && !quoted) {
      if (inWord) words.push(cur);
      cur = '';
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  if (inWord) words.push(cur);
  return words;
}

describe('README: kvgate replay', () => {
  it('has the section', () => {
    expect(section.startsWith('## kvgate replay')).toBe(true);
  });

  it('every replay command in it parses', () => {
    const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!.replace(/\\\n\s*/g, '');
    const commands = block.split('\n').filter((l) => l.startsWith('node bin/kvgate.js replay '));
    expect(commands.length).toBeGreaterThanOrEqual(6);
    for (const c of commands) {
      const args = shellWords(c.replace(/\s*\|.*$/, '')).slice(3);
      expect(() => parseReplayArgs(args), c).not.toThrow();
    }
  });

  it('every flag of its table is a flag of the command', () => {
    const table = section.slice(section.indexOf('| Flag |'), section.indexOf('\n\n', section.indexOf('| Flag |')));
    const flags = [...table.matchAll(/`(--[a-z-]+)/g)].map((m) => m[1]!);
    expect(flags.length).toBeGreaterThan(15);
    for (const f of flags) {
      if (['--num-gpu-blocks', '--block-size', '--max-num-batched-tokens', '--max-num-seqs', '--perf-profile', '--kv-bytes-per-token',
        '--kv-transfer-bandwidth', '--kv-lease-ms', '--engine', '--max-model-len'].includes(f)) {
        // Mocker flags, forwarded: they parse.
        expect(() => parseReplayArgs(['--trace', 't', f, f === '--engine' ? 'sglang' : f === '--perf-profile' ? 'h100' : '64']), f).not.toThrow();
      } else {
        expect(HELP, f).toContain(f);
      }
    }
  });
});
