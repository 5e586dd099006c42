import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPLAY_HELP as HELP, parseReplayArgs } from '../../src/cli/replay.js';
import { parsePolicies } from '../../src/replay/policy.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const section = readme.slice(
  readme.indexOf('## kvgate replay'),
  readme.indexOf('\n## ', readme.indexOf('## kvgate replay') + 5),
);

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

/** The replay commands of the section's first shell block, continuation lines joined. */
function replayCommands(): string[] {
  const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!.replace(/\\\n\s*/g, '');
  return block.split('\n').filter((l) => l.startsWith('node bin/kvgate.js replay '));
}

/** Runs a shell command line in the repository root; resolves with its exit code and output. */
function sh(command: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('/bin/sh', ['-c', command], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('README: kvgate replay', () => {
  it('has the section', () => {
    expect(section.startsWith('## kvgate replay')).toBe(true);
  });

  it('every replay command in it parses', () => {
    const commands = replayCommands();
    expect(commands.length).toBeGreaterThanOrEqual(6);
    for (const c of commands) {
      const args = shellWords(c.replace(/\s*\|.*$/, '')).slice(3);
      expect(() => parseReplayArgs(args), c).not.toThrow();
    }
  });

  it('its agentic comparison parses as written and compares kv with both Dynamo presets', () => {
    const sub = section.slice(section.indexOf('### Agentic workload'));
    const block = /```sh\n([\s\S]*?)```/.exec(sub)![1]!.replace(/\\\n\s*/g, '');
    const line = block.split('\n').find((l) => l.startsWith('node bin/kvgate.js replay '))!;
    const plan = parseReplayArgs(shellWords(line).slice(3));
    expect(plan.config.agentic?.sessions).toBeGreaterThan(0);
    expect(plan.config.policies.map((p) => p.name)).toEqual(
      expect.arrayContaining(['kv', 'dynamo', 'dynamo-agentic', 'round-robin']),
    );
  });

  it('every flag of its table is a flag of the command', () => {
    const table = section.slice(section.indexOf('| Flag |'), section.indexOf('\n\n', section.indexOf('| Flag |')));
    const flags = [...table.matchAll(/`(--[a-z-]+)/g)].map((m) => m[1]!);
    expect(flags.length).toBeGreaterThan(15);
    for (const f of flags) {
      if (
        [
          '--num-gpu-blocks',
          '--block-size',
          '--max-num-batched-tokens',
          '--max-num-seqs',
          '--perf-profile',
          '--kv-bytes-per-token',
          '--kv-transfer-bandwidth',
          '--kv-lease-ms',
          '--engine',
          '--max-model-len',
        ].includes(f)
      ) {
        // Mocker flags, forwarded: they parse.
        expect(
          () =>
            parseReplayArgs(['--trace', 't', f, f === '--engine' ? 'sglang' : f === '--perf-profile' ? 'h100' : '64']),
          f,
        ).not.toThrow();
      } else {
        expect(HELP, f).toContain(f);
      }
    }
  });

  it('lists the same --compare policies as the help, and the +dynamo-order suffix in both', () => {
    const row = section.split('\n').find((l) => l.startsWith('| `--compare LIST` |'))!;
    const help = HELP.slice(HELP.indexOf('  --compare LIST'), HELP.indexOf('  --router-config'));
    const helpNames = help
      .slice(help.indexOf('policies:') + 'policies:'.length, help.indexOf('(default kv)'))
      .split(/[\s,]+/)
      .filter((n) => n !== '');
    const readmeNames = [...row.matchAll(/`([a-z][a-z0-9-]*)`/g)].map((m) => m[1]!);
    expect(readmeNames.sort(), 'the README row against the help').toEqual([...helpNames].sort());
    expect(row).toMatch(/followed by `\+dynamo-order` \(e\.g\. `kv\+dynamo-order`\)/);
    expect(help).toMatch(/followed by\s+\+dynamo-order \(e\.g\. kv\+dynamo-order\)/);
    for (const name of helpNames) {
      expect(() => parsePolicies([name, `${name}+dynamo-order`]), name).not.toThrow();
    }
  });

  // issue 17 item 6: the README's replay commands point at a trace a clone has, and the first runs as written.
  it('names only traces that are in the repository', () => {
    const traces = new Set(replayCommands().map((c) => shellWords(c)[shellWords(c).indexOf('--trace') + 1]!));
    expect(traces.size).toBeGreaterThan(0);
    for (const t of traces) {
      expect(existsSync(`${ROOT}${t}`), t).toBe(true);
      // Tracked by git, so a fresh clone has it (skipped outside a git checkout).
      let tracked: string | undefined;
      try {
        tracked = execFileSync('git', ['ls-files', '--', t], { cwd: ROOT, encoding: 'utf8' });
      } catch {
        tracked = undefined;
      }
      if (tracked !== undefined) expect(tracked.trim(), `${t} is not committed`).toBe(t);
    }
  });

  it('its first command runs as written, in seconds, and prints the comparison', async () => {
    if (!existsSync(`${ROOT}dist/src/cli/index.js`))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    const first = replayCommands()[0]!;
    expect(first).toContain('--max-requests');
    const r = await sh(first);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^\| kv \| /m);
    expect(r.stdout).toMatch(/^\| round-robin \| /m);
    // stderr is not a terminal here: progress comes as plain lines.
    expect(r.stderr).toMatch(/^offline replay: 0\/\d+ requests \(0%\) after 0\.0 s$/m);
  }, 120_000);
});
