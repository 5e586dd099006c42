/**
 * The README's shell snippets that start kvgate processes run as written
 * (the simulated P/D serving and the mocker's prefix cache): each waits for
 * readiness by polling, never by sleeping a guess, and prints what the
 * README says it prints. They run in a scratch folder holding `bin/` (the
 * built CLI) and the files the README defines beside them (pd.yaml), minus
 * the `npm ci && npm run build` line that `npm test` has already done. The
 * ports are the README's: fixed, below the range the OS picks ports from.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, assertBuilt } from '../../helpers/process.js';

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'kvgate-readme-snippets-'));
symlinkSync(join(ROOT, 'bin'), join(dir, 'bin'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The first ```lang block after `heading` in the README that contains `marker`. */
function block(heading: string, lang: string, marker: string): string {
  const from = readme.indexOf(heading);
  expect(from, heading).toBeGreaterThan(0);
  const found = [...readme.slice(from).matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))]
    .map((m) => m[1]!)
    .find((b) => b.includes(marker));
  expect(found, `${heading}: a ${lang} block with ${marker}`).toBeDefined();
  return found!;
}

/** Runs `script` with bash in `dir` as its own process group (killed when done); resolves to its stdout. */
function runSnippet(script: string, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  assertBuilt();
  const body = script.replace(/^npm ci && npm run build\n/m, '');
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', body], { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    child.stderr.resume();
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      // What the snippet left running in the background (its servers) goes with it.
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // the group is gone already
      }
      resolve({ code, out });
    });
  });
}

describe("the README's snippets run as written", () => {
  it('simulated P/D serving: ready by polling, then the answer names the prefill and decode workers', async () => {
    const script = block('**Try it with simulated engines**', 'sh', 'serve -c pd.yaml');
    expect(script).not.toMatch(/^sleep /m);
    writeFileSync(join(dir, 'pd.yaml'), block('**Try it with simulated engines**', 'yaml', 'role: prefill'));
    const { code, out } = await runSnippet(script, 60_000);
    expect(code).toBe(0);
    expect(out).toMatch(/^x-kvgate-worker: [34]\r?$/im);
    expect(out).toMatch(/^x-kvgate-prefill-worker: [12]\r?$/im);
  }, 90_000);

  it("the mocker's prefix cache: the second answer reports cached tokens", async () => {
    const script = block('## kvgate mocker', 'sh', 'mocker --count 2 --port 8000');
    expect(script).not.toMatch(/^sleep /m);
    const { code, out } = await runSnippet(script, 60_000);
    expect(code).toBe(0);
    const answers = out.split('\n').filter((l) => l.startsWith('{') && l.includes('"choices"'));
    expect(answers).toHaveLength(2);
    expect(answers[1]).toContain('"cached_tokens":16');
    expect(out).toMatch(/^vllm:prefix_cache_hits_total\{[^}]*\} [1-9]/m);
  }, 90_000);
});
