/**
 * The `kvgate` command as an operator meets it: a real process (bin/kvgate.js
 * over the compiled dist/), its exit code, stdout and stderr.
 */
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ROUTER_FLAG_FIELDS } from '../../src/config/router-flags.js';
import { serveUsage } from '../../src/config/index.js';
import { closestFlag } from '../../src/config/flags.js';
import { until } from '../helpers/until.js';
import { kvgate, kvgateRun, ROOT, type KvgateProcess } from './process.js';

const VERSION = (JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { version: string }).version;

let running: KvgateProcess | undefined;
let holder: Server | undefined;
afterEach(async () => {
  if (running !== undefined && running.child.exitCode === null && running.child.signalCode === null) {
    running.child.kill('SIGKILL');
    await running.exited;
  }
  running = undefined;
  await new Promise<void>((r) => (holder === undefined ? r() : holder.close(() => r())));
  holder = undefined;
});

describe('kvgate --version', () => {
  // issue 17 item 2 (second half): `kvgate --version` prints the package version.
  it('--version, -v and version print the version of package.json', async () => {
    for (const arg of ['--version', '-v', 'version']) {
      const r = await kvgateRun([arg]);
      expect(r.code, arg).toBe(0);
      expect(r.stdout, arg).toBe(`kvgate ${VERSION}\n`);
      expect(r.stderr, arg).toBe('');
    }
  });
});

describe('unknown commands', () => {
  it('a mistyped command gets the command it was probably meant to be, and exit code 2', async () => {
    const r = await kvgateRun(['serv']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^kvgate: unknown command 'serv'; did you mean 'serve'\?\n\nusage: kvgate <command>/);
    const far = await kvgateRun(['frobnicate']);
    expect(far.code).toBe(2);
    expect(far.stderr).toMatch(/^kvgate: unknown command 'frobnicate'\n\nusage:/);
  });
});

describe('unknown flags', () => {
  it('are reported once per command, with the closest known flag', async () => {
    const serve = await kvgateRun(['serve', '--prot', '8080']);
    expect(serve.code).toBe(2);
    // Not "kvgate serve: kvgate serve: ...": the command names itself once.
    expect(serve.stderr.match(/kvgate serve:/g)).toHaveLength(1);
    expect(serve.stderr).toContain("Unknown option '--prot'; did you mean --port?");
    const replay = await kvgateRun(['replay', '--trce', 'x.jsonl']);
    expect(replay.code).toBe(2);
    expect(replay.stderr.match(/kvgate replay:/g)).toHaveLength(1);
    expect(replay.stderr).toContain('did you mean --trace?');
    const mocker = await kvgateRun(['mocker', '--cont', '2']);
    expect(mocker.code).toBe(2);
    expect(mocker.stderr).toContain('did you mean --count?');
  });

  it('suggest by edit distance or a unique prefix, and nothing when nothing is close', () => {
    const known = ['port', 'host', 'router-temperature', 'router-ttl-secs', 'help'];
    expect(closestFlag('--prot', known)).toBe('--port');
    expect(closestFlag('--hots', known)).toBe('--host');
    expect(closestFlag('--router-temp', known)).toBe('--router-temperature');
    expect(closestFlag('--router-ttl-sec', known)).toBe('--router-ttl-secs');
    expect(closestFlag('--xyzzy', known)).toBeUndefined();
    expect(closestFlag('-x', known)).toBeUndefined();
  });
});

describe('kvgate serve --help', () => {
  it('describes every router knob in a line of its own, with its default', () => {
    const help = serveUsage();
    const lines = help.split('\n');
    for (const [field, spec] of Object.entries(ROUTER_FLAG_FIELDS)) {
      if (spec.flag === null) {
        expect(help, field).toContain(`router.${spec.dynamo}`);
        continue;
      }
      const name = spec.negativeFlag === undefined ? spec.flag : `--[no-]${spec.flag.slice(2)}`;
      const at = lines.findIndex((l) => l.trim() === name || l.trim().startsWith(`${name} `));
      expect(at, name).toBeGreaterThan(0);
      const description = lines[at + 1]!.trim();
      expect(description, name).toBe(`${spec.help}${description.slice(spec.help.length)}`);
      expect(spec.help.length, name).toBeGreaterThan(15);
    }
    expect(help).toMatch(/--router-temperature X\n\s+softmax temperature over costs; 0 = always the cheapest \[0\]/);
  });
});

describe('kvgate serve output', () => {
  // issue 17 item 2 (first half): stdout carries JSON lines only; the human banner goes to stderr.
  it('writes only JSON lines to stdout, and the banner to stderr', async () => {
    running = kvgate(['serve', '--port', '0', '--preprocess-threads', '0', '--log-level', 'debug']);
    const p = running;
    await until(
      () => {
        if (p.child.exitCode !== null) throw new Error(`kvgate serve exited (${p.child.exitCode}): ${p.stderr}`);
        return /serving the embedded demo at http:\/\/[\d.]+:\d+/.test(p.stderr);
      },
      'the banner on stderr',
      60_000,
    );
    const url = /serving the embedded demo at (http:\/\/[\d.]+:\d+)/.exec(p.stderr)![1]!;
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3-demo', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.text();
    await until(() => p.stdout.split('\n').length >= 3, 'the request log line', 10_000);
    p.child.kill('SIGTERM');
    await p.exited;
    const lines = p.stdout.split('\n').filter((l) => l !== '');
    expect(lines.length).toBeGreaterThanOrEqual(2);
    for (const line of lines) {
      const parsed: unknown = JSON.parse(line);
      expect(typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed), line).toBe(true);
    }
    expect(p.stderr).toContain('curl -si');
  });

  // issue 17, "Failures must be loud": EADDRINUSE is one line naming the address and what to do.
  it('says in one line which address is taken and what to do, without a stack trace', async () => {
    holder = createServer();
    await new Promise<void>((r) => holder!.listen(0, '127.0.0.1', r));
    const port = (holder.address() as AddressInfo).port;
    const r = await kvgateRun([
      'serve',
      '--port',
      String(port),
      '--model',
      'm',
      '--worker',
      'http://127.0.0.1:9',
      '--tokenizer',
      'none',
      '--router-mode',
      'round-robin',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `kvgate serve: cannot listen on 127.0.0.1:${port}: the address is already in use (by another kvgate or another server); ` +
        'stop that process or choose another port with --port (--admin-port for the admin listener) or listen.port in the config (0 = any free port)\n',
    );
    for (const line of r.stdout.split('\n').filter((l) => l !== ''))
      expect(() => JSON.parse(line) as unknown, line).not.toThrow();
  });
});
