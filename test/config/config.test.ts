import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  configChanges,
  loadGatewayConfig,
  parseServeFlags,
  parseFieldPath,
  reloadProblems,
  type ConfigProblem,
} from '../../src/config/index.js';
import { KV_ROUTER_DEFAULTS } from '../../src/core/config.js';
import { isKvgateError } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(text: string, ext = 'yaml'): string {
  const path = join(dir, `c${n++}.${ext}`);
  writeFileSync(path, text);
  return path;
}

/** Loads and returns the problems (the test fails if loading succeeds). */
function problemsOf(opts: Parameters<typeof loadGatewayConfig>[0]): ConfigProblem[] {
  try {
    loadGatewayConfig(opts);
  } catch (err) {
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    const problems = (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
    expect(problems.length).toBeGreaterThan(0);
    // The message carries every problem with its source, path and reason.
    for (const p of problems) expect((err as Error).message).toContain(`${p.path}: ${p.reason}`);
    return problems;
  }
  throw new Error('expected the config to be rejected');
}

const WORKERS = `
    workers:
      - { id: 1, url: "http://10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }
      - { id: 2, url: "http://10.0.0.2:8000", kv_events: "tcp://10.0.0.2:5557" }`;

describe('config: valid files', () => {
  it('resolves a full YAML file with defaults, relative paths and router knobs', () => {
    const tokDir = join(dir, 'tok');
    mkdirSync(tokDir, { recursive: true });
    writeFileSync(join(tokDir, 'tokenizer.json'), '{}');
    writeFileSync(join(tokDir, 'tokenizer_config.json'), '{}');
    const path = file(`
listen: { host: 0.0.0.0, port: 9000 }
limits: { max_body_bytes: 65536, max_prompt_tokens: 4096 }
router: { router_temperature: 0.5, overlap_score_credit: 2 }
models:
  - name: llama
    block_size: 32
    tokenizer: tok
    router: { router_temperature: 0 }
${WORKERS}
  - name: sg
    router_mode: round-robin
    engine: sglang
    max_prompt_tokens: 100
    workers:
      - { id: 10, url: "http://p:30000/", role: prefill }
      - { id: 11, url: "http://d:30001", role: decode, dp_size: 4 }
`);
    const c = loadGatewayConfig({ file: path, env: {} });
    expect(c.file).toBe(path);
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 9000 });
    expect(c.limits.maxBodyBytes).toBe(65536);
    expect(c.limits.maxConcurrentRequests).toBe(1024);
    expect(c.admin).toEqual({ enabled: false, listen: undefined });
    const [llama, sg] = c.models;
    expect(llama!.blockSize).toBe(32);
    expect(llama!.routerMode).toBe('kv');
    expect(llama!.maxPromptTokens).toBe(4096);
    expect(llama!.tokenizer).toEqual({
      kind: 'files',
      files: { tokenizerJson: join(tokDir, 'tokenizer.json'), tokenizerConfig: join(tokDir, 'tokenizer_config.json') },
    });
    // The model's router section wins over the global one, which wins over the defaults.
    expect(llama!.router.routerTemperature).toBe(0);
    expect(llama!.router.overlapScoreCredit).toBe(2);
    expect(llama!.router.routerTtlSecs).toBe(KV_ROUTER_DEFAULTS.routerTtlSecs);
    expect(llama!.workers[0]).toMatchObject({
      id: 1,
      model: 'llama',
      url: 'http://10.0.0.1:8000',
      role: 'aggregated',
      dialect: 'vllm',
      dpSize: 1,
      dpStart: 0,
      kvEvents: { endpoint: 'tcp://10.0.0.1:5557' },
    });
    expect(sg!.maxPromptTokens).toBe(100);
    expect(sg!.tokenizer).toEqual({ kind: 'none', onMissing: 'approximate' });
    // SGLang prefill workers get a bootstrap endpoint on their host, default port 8998; trailing slash trimmed.
    expect(sg!.workers[0]).toMatchObject({
      url: 'http://p:30000',
      role: 'prefill',
      dialect: 'sglang',
      bootstrap: { host: 'p', port: 8998 },
    });
    expect(sg!.workers[1]!.dpSize).toBe(4);
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.models[0]!.workers[0])).toBe(true);
    expect(c.warnings.some((w) => w.includes('round-robin'))).toBe(false);
  });

  it('reads JSON, and with no file at all gives the defaults and no models (the embedded demo)', () => {
    const c = loadGatewayConfig({
      file: file(
        JSON.stringify({
          listen: { port: 0 },
          models: [{ name: 'm', workers: [{ id: 1, url: 'http://a:1' }], router: { use_kv_events: false } }],
        }),
        'json',
      ),
      env: {},
    });
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 0 });
    const d = loadGatewayConfig({ env: {} });
    expect(d.listen).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(d.models).toEqual([]);
    expect(d.apiKeys).toEqual([]);
  });

  it('hardening knobs: segment cache bytes, session limits and health probing, with defaults, file values, flags and ranges', () => {
    const d = loadGatewayConfig({ env: {} });
    expect(d.preprocess.segmentCacheBytes).toBe(32 * 1024 * 1024);
    expect([d.limits.maxSessionTimeoutS, d.limits.maxSessions]).toEqual([3600, 100_000]);
    expect(d.health).toEqual({
      intervalMs: 2000,
      timeoutMs: 1000,
      unhealthyAfter: 2,
      maxEjectedPercent: 50,
      outlierDetection: { consecutiveErrors: 5, baseEjectionMs: 30_000, maxEjectionMs: 300_000 },
    });
    const c = loadGatewayConfig({
      file: file(`
preprocess: { segment_cache_bytes: 1048576, task_timeout_ms: 120000 }
limits: { max_session_timeout_s: 600, max_sessions: 5000 }
health: { interval_ms: 500, timeout_ms: 250, unhealthy_after: 3, max_ejected_percent: 25 }
models:
  - name: m
${WORKERS}
`),
      overrides: parseServeFlags(['--segment-cache-bytes', '2097152']).overrides,
      env: {},
    });
    expect(c.preprocess.segmentCacheBytes).toBe(2_097_152);
    expect(c.preprocess.taskTimeoutMs).toBe(120_000);
    expect([c.limits.maxSessionTimeoutS, c.limits.maxSessions]).toEqual([600, 5000]);
    expect(c.health).toEqual({
      intervalMs: 500,
      timeoutMs: 250,
      unhealthyAfter: 3,
      maxEjectedPercent: 25,
      outlierDetection: { consecutiveErrors: 5, baseEjectionMs: 30_000, maxEjectionMs: 300_000 },
    });
    const p = problemsOf({
      file: file(`
limits: { max_sessions: 0, max_session_timeout_s: 0 }
health: { max_ejected_percent: 101, probe: 1 }
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['limits.max_sessions']).toMatch(/must be an integer in \[1,/);
    expect(by['limits.max_session_timeout_s']).toMatch(/must be an integer in \[1,/);
    expect(by['health.max_ejected_percent']).toBe('must be an integer in [0, 100], got 101');
    expect(by['health.probe']).toBeDefined();
  });

  // issue 14 (outlier ejection): health.outlier_detection, validated field by field; the share is health.max_ejected_percent
  it('health.outlier_detection: consecutive errors, base and longest ejection, validated with field names', () => {
    const c = loadGatewayConfig({
      env: {},
      file: file(`
health: { max_ejected_percent: 30, outlier_detection: { consecutive_errors: 3, base_ejection_ms: 5000, max_ejection_ms: 20000 } }
models:
  - name: m
${WORKERS}
`),
    });
    expect(c.health.outlierDetection).toEqual({ consecutiveErrors: 3, baseEjectionMs: 5000, maxEjectionMs: 20_000 });
    expect(c.health.maxEjectedPercent).toBe(30);
    const p = problemsOf({
      file: file(`
health: { outlier_detection: { consecutive_errors: -1, base_ejection_ms: 10000, max_ejection_ms: 5000, interval_ms: 3 } }
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['health.outlier_detection.consecutive_errors']).toMatch(/must be an integer in \[0,/);
    expect(by['health.outlier_detection.max_ejection_ms']).toMatch(/must be an integer in \[10000,/);
    expect(by['health.outlier_detection.interval_ms']).toBeDefined();
  });

  // issue 17 (traces): tracing is off by default, configured by tracing.otlp_endpoint and sample_ratio
  it('tracing: off by default; otlp_endpoint (an http URL), sample_ratio in [0, 1], export_timeout_ms', () => {
    expect(loadGatewayConfig({ env: {} }).tracing).toEqual({
      otlpEndpoint: undefined,
      sampleRatio: 1,
      exportTimeoutMs: 2000,
    });
    const c = loadGatewayConfig({
      file: file(`
tracing: { otlp_endpoint: "http://collector:4318", sample_ratio: 0.25, export_timeout_ms: 5000 }
models:
  - name: m
${WORKERS}
`),
      env: {},
    });
    expect(c.tracing).toEqual({ otlpEndpoint: 'http://collector:4318', sampleRatio: 0.25, exportTimeoutMs: 5000 });
    const by = Object.fromEntries(
      problemsOf({
        file: file(`
tracing: { otlp_endpoint: "collector:4318x", sample_ratio: 2, exporter: grpc, export_timeout_ms: 0 }
`),
      }).map((x) => [x.path, x.reason]),
    );
    expect(by['tracing.otlp_endpoint']).toMatch(/http\(s\) URL/);
    expect(by['tracing.sample_ratio']).toBeDefined();
    expect(by['tracing.exporter']).toBeDefined();
    expect(by['tracing.export_timeout_ms']).toMatch(/must be an integer in \[100, 600000\]/);
  });

  it('flags override the file, including per-model router sections', () => {
    const path = file(`
listen: { port: 9000 }
models:
  - name: m
    router: { router_temperature: 0.7 }
${WORKERS}
`);
    const flags = parseServeFlags([
      '-c',
      path,
      '--port',
      '9100',
      '--router-temperature',
      '0.25',
      '--block-size',
      '64',
      '--no-router-kv-events',
    ]);
    expect(flags.configFile).toBe(path);
    const c = loadGatewayConfig({ file: flags.configFile, overrides: flags.overrides, env: {} });
    expect(c.listen.port).toBe(9100);
    expect(c.models[0]!.router.routerTemperature).toBe(0.25);
    expect(c.models[0]!.router.useKvEvents).toBe(false);
    expect(c.models[0]!.blockSize).toBe(64);
  });

  it('builds a model from --model/--worker, and api keys from the environment', () => {
    const flags = parseServeFlags([
      '--model',
      'm',
      '--worker',
      'http://a:1',
      '--worker',
      'url=http://b:2,id=7,dp_size=2',
      '--no-router-kv-events',
      '--set',
      'auth.api_keys_env=KEYS',
    ]);
    const c = loadGatewayConfig({ overrides: flags.overrides, env: { KEYS: 'key-one-1234, key-two-5678' } });
    expect(c.models[0]!.workers.map((w) => [w.id, w.url, w.dpSize])).toEqual([
      [1, 'http://a:1', 1],
      [7, 'http://b:2', 2],
    ]);
    expect(c.apiKeys).toEqual(['key-one-1234', 'key-two-5678']);
  });

  it('flags for every model (--tokenizer, --block-size, --router-mode, --enforce-disagg) apply to a --model defined by flags', () => {
    const flags = parseServeFlags([
      '--tokenizer',
      'demo',
      '--block-size',
      '32',
      '--router-mode',
      'round-robin',
      '--enforce-disagg',
      '--model',
      'm',
      '--worker',
      'url=http://a:1,role=decode',
      '--worker',
      'url=http://p:1,id=9,role=prefill',
    ]);
    const c = loadGatewayConfig({ overrides: flags.overrides, env: {} });
    expect(c.models[0]).toMatchObject({
      name: 'm',
      tokenizer: { kind: 'demo' },
      blockSize: 32,
      routerMode: 'round-robin',
      enforceDisagg: true,
    });
  });

  it('the embedded demo base fills in models only when none are configured', () => {
    const base = {
      models: [
        {
          name: 'demo',
          tokenizer: 'demo',
          workers: [{ id: 1, url: 'http://127.0.0.1:1', kv_events: 'tcp://127.0.0.1:2' }],
        },
      ],
    };
    const c = loadGatewayConfig({ base, env: {} });
    expect(c.models[0]!.name).toBe('demo');
    expect(c.models[0]!.tokenizer).toEqual({ kind: 'demo' });
    const problems = problemsOf({ base: { models: [{ name: 'demo', workers: [] }] }, env: {} });
    expect(problems[0]!.source).toBe('embedded demo');
  });

  // issue 12 item 11: a config file that lists no model is refused, it never starts the embedded demo.
  it('a config file with models: [] (or no models at all) is refused with a models error, even with the demo base', () => {
    for (const text of ['listen: { port: 0 }\nmodels: []\n', 'listen: { port: 0 }\n', '{"models": []}']) {
      const path = file(text, text.startsWith('{') ? 'json' : 'yaml');
      const base = {
        models: [
          {
            name: 'demo',
            tokenizer: 'demo',
            workers: [{ id: 1, url: 'http://127.0.0.1:1', kv_events: 'tcp://127.0.0.1:2' }],
          },
        ],
      };
      // The demo's models fill a file only where it says nothing; an explicit empty list stays empty.
      for (const opts of text.includes('models')
        ? [
            { file: path, env: {} },
            { file: path, base, env: {} },
          ]
        : [{ file: path, env: {} }]) {
        const problems = problemsOf(opts);
        expect(problems).toHaveLength(1);
        expect(problems[0]).toMatchObject({ source: path, path: 'models' });
        expect(problems[0]!.reason).toMatch(/at least one model.*embedded demo/);
      }
    }
    // Flags defining the model fill a file that has none.
    const flags = parseServeFlags([
      '-c',
      file('listen: { port: 0 }\n'),
      '--model',
      'm',
      '--worker',
      'http://a:1',
      '--no-router-kv-events',
    ]);
    expect(loadGatewayConfig({ file: flags.configFile, overrides: flags.overrides, env: {} }).models[0]!.name).toBe(
      'm',
    );
  });
});

describe('config: every error class names the source, the field and the reason', () => {
  it('unreadable file', () => {
    const p = problemsOf({ file: join(dir, 'missing.yaml') });
    expect(p).toEqual([
      { source: join(dir, 'missing.yaml'), path: '(file)', reason: 'cannot read config: file not found' },
    ]);
  });

  it('YAML syntax error with its line and column', () => {
    const path = file('listen:\n  port: 1\n  host: [oops\n');
    const [p] = problemsOf({ file: path });
    expect(p!.source).toBe(path);
    expect(p!.reason).toMatch(/^not valid YAML/);
    expect(p!.position).toMatch(/^\d+:\d+$/);
  });

  it('duplicate keys are a YAML error', () => {
    const [p] = problemsOf({ file: file('listen: { port: 1 }\nlisten: { port: 2 }\n') });
    expect(p!.reason).toMatch(/not valid YAML: .*unique/i);
  });

  it('JSON syntax error', () => {
    const [p] = problemsOf({ file: file('{"listen": {"port": 1,}}', 'json') });
    expect(p!.reason).toMatch(/^not valid JSON/);
  });

  it('a document that is not a mapping', () => {
    const [p] = problemsOf({ file: file('- a\n- b\n') });
    expect(p!.path).toBe('(root)');
  });

  it('unknown fields, with a did-you-mean hint and the position of the field', () => {
    const path = file('listen:\n  port: 1\nlimts: {}\nmodels:\n  - name: m\n    blok_size: 16\n' + WORKERS);
    const p = problemsOf({ file: path });
    expect(p.find((x) => x.path === 'limts')?.reason).toMatch(/unknown field \(did you mean "limits"\?\)/);
    expect(p.find((x) => x.path === 'limts')?.position).toBe('3:1');
    expect(p.find((x) => x.path === 'models[0].blok_size')?.reason).toMatch(/did you mean "block_size"/);
  });

  it('wrong types, out-of-range numbers and bad enum values', () => {
    const p = problemsOf({
      file: file(`
listen: { port: 70000, host: "not a host!" }
limits: { max_body_bytes: "big", max_concurrent_requests: 0 }
log: { level: loud }
models:
  - name: m
    router_mode: fastest
    block_size: 0
    enforce_disagg: "yes"
${WORKERS}
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['listen.port']).toBe('must be an integer in [0, 65535], got 70000');
    expect(by['listen.host']).toMatch(/must be a host name/);
    expect(by['limits.max_body_bytes']).toMatch(/must be an integer .* got "big"/);
    expect(by['limits.max_concurrent_requests']).toMatch(/must be an integer in \[1,/);
    expect(by['log.level']).toMatch(/must be one of fatal, error/);
    expect(by['models[0].router_mode']).toMatch(/must be one of kv, round-robin/);
    expect(by['models[0].block_size']).toMatch(/integer in \[1, 1048576\]/);
    expect(by['models[0].enforce_disagg']).toMatch(/true or false/);
  });

  it('missing required fields and malformed URLs and ZMQ endpoints', () => {
    const p = problemsOf({
      file: file(`
models:
  - workers:
      - { url: "ftp://x" }
      - { id: 3, url: "http://ok:1", kv_events: "tcp://*:5557" }
      - { id: 4, kv_events: { endpoint: "udp://h:1" } }
  - name: empty
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['models[0].name']).toBe('is required');
    expect(by['models[0].workers[0].id']).toBe('is required');
    expect(by['models[0].workers[0].url']).toMatch(/must be an http:\/\/ or https:\/\/ URL, got "ftp:\/\/x"/);
    expect(by['models[0].workers[1].kv_events']).toMatch(/bind address/);
    expect(by['models[0].workers[2].url']).toBe('is required');
    expect(by['models[0].workers[2].kv_events.endpoint']).toMatch(/ZMQ endpoint/);
    expect(by['models[1].workers']).toBe('must list at least one worker');
  });

  it('cross-field rules: unique ids and names, disaggregation shape, enforce_disagg, KV events', () => {
    const p = problemsOf({
      file: file(`
router: { use_kv_events: false }
models:
  - name: a
    workers: [{ id: 1, url: "http://a:1" }]
  - name: a
    workers: [{ id: 1, url: "http://b:1" }]
  - name: dec
    workers: [{ id: 5, url: "http://c:1", role: decode }]
  - name: mixed
    enforce_disagg: true
    workers: [{ id: 6, url: "http://d:1" }, { id: 7, url: "http://e:1", role: prefill, engine: sglang }]
  - name: boot
    workers: [{ id: 8, url: "http://f:1", bootstrap_port: 1234 }]
  - name: needs-events
    router: { use_kv_events: true }
    workers: [{ id: 9, url: "http://g:1" }]
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['models[1].name']).toBe('duplicates models[0].name');
    expect(by['models[1].workers[0].id']).toMatch(/already the id of models\[0\].workers\[0\]/);
    expect(by['models[2].workers']).toBe('has decode workers but no prefill worker');
    expect(by['models[3].workers']).toMatch(/either aggregated or disaggregated/);
    expect(by['models[3].enforce_disagg']).toBeUndefined();
    expect(by['models[4].bootstrap_port'] ?? by['models[4].workers[0].bootstrap_port']).toMatch(
      /only SGLang prefill workers/,
    );
    expect(by['models[5].workers[0].kv_events']).toMatch(/is required in router_mode kv/);
  });

  it('enforce_disagg without prefill workers', () => {
    const p = problemsOf({ file: file(`models:\n  - name: m\n    enforce_disagg: true\n${WORKERS}\n`) });
    expect(p.map((x) => [x.path, x.reason])).toEqual([
      ['models[0].enforce_disagg', 'requires at least one prefill worker'],
    ]);
  });

  // issue 12 item 10: whether a decode worker can serve alone is said per worker, decode workers only.
  it('serves_aggregated: decode workers only, a boolean, false by default', () => {
    const yaml = (extra: string): string =>
      file(`
router: { use_kv_events: false }
models:
  - name: m
    workers:
      - { id: 1, url: "http://p:1", role: prefill${extra} }
      - { id: 2, url: "http://d:1", role: decode, serves_aggregated: true }
      - { id: 3, url: "http://d:2", role: decode }
`);
    const by = Object.fromEntries(
      problemsOf({ file: yaml(', serves_aggregated: true') }).map((x) => [x.path, x.reason]),
    );
    expect(by['models[0].workers[0].serves_aggregated']).toMatch(/only decode workers/);
    const ok = loadGatewayConfig({ file: yaml('') });
    expect(ok.models[0]!.workers.map((w) => w.servesAggregated)).toEqual([undefined, true, undefined]);
  });

  it('router knobs are validated by the core, with Dynamo names in the paths', () => {
    const p = problemsOf({
      file: file(`
router: { router_temperature: -1, router_temprature: 1, router_queue_policy: lifo }
models:
  - name: m
    router: { router_track_output_blocks: true, router_track_active_blocks: false }
${WORKERS}
`),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['router.router_temperature']).toBe('must be >= 0');
    expect(by['router.router_temprature']).toMatch(/unknown router knob \(did you mean "router_temperature"\?\)/);
    expect(by['router.router_queue_policy']).toMatch(/fcfs, wspt/);
    expect(by['models[0].router.router_track_output_blocks']).toBe('requires router_track_active_blocks = true');
  });

  it('tokenizer files that do not exist', () => {
    const p = problemsOf({
      file: file(
        `models:\n  - name: m\n    tokenizer: { json: nope/tokenizer.json }\n${WORKERS}\n  - name: n\n    tokenizer: no-such-dir\n    workers: [{ id: 9, url: "http://x:1", kv_events: "tcp://x:2" }]\n`,
      ),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['models[0].tokenizer.json']).toMatch(/^file not found: .*nope\/tokenizer.json$/);
    expect(by['models[1].tokenizer']).toMatch(/^no such file or directory/);
  });

  it('API key sources: short keys (never echoed), unset env var, unreadable file', () => {
    const p = problemsOf({
      file: file('auth: { api_keys: ["short"], api_keys_env: KVGATE_TEST_KEYS, api_keys_file: keys.txt }\n'),
      env: {},
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['auth.api_keys[0]']).toMatch(/at least 8 characters/);
    expect(JSON.stringify(p)).not.toContain('"short"');
    expect(by['auth.api_keys_env']).toMatch(/KVGATE_TEST_KEYS is not set/);
    expect(by['auth.api_keys_file']).toMatch(/cannot read .*keys.txt: ENOENT/);
  });

  it('API keys: one rule whatever the source (the file, the environment, a keys file), and no key echoed', () => {
    writeFileSync(join(dir, 'weak-keys.txt'), '# keys\nlong-enough-key-1\nabc\n');
    const p = problemsOf({
      file: file('auth: { api_keys_env: KVGATE_TEST_KEYS, api_keys_file: weak-keys.txt }\n'),
      env: { KVGATE_TEST_KEYS: 'good-key-12345, abc' },
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['auth.api_keys_env']).toBe('key 2 of KVGATE_TEST_KEYS must be at least 8 characters without spaces');
    expect(by['auth.api_keys_file']).toMatch(/^line 3 of .*weak-keys.txt: the key must be at least 8 characters/);
    expect(JSON.stringify(p)).not.toMatch(/"abc"|: abc/);
  });

  it("a worker URL that ends in /v1 is refused with the engine's base URL to use instead", () => {
    const p = problemsOf({
      file: file('models:\n  - name: m\n    workers:\n      - { id: 1, url: "http://10.0.0.5:8000/v1/" }\n'),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['models[0].workers[0].url']).toBe(
      "must be the engine's base URL without /v1 (kvgate adds the API paths; requests would go to /v1/v1/...): " +
        'http://10.0.0.5:8000, got "http://10.0.0.5:8000/v1/"',
    );
  });

  it('the same engine URL twice in one model is refused', () => {
    const p = problemsOf({
      file: file(
        'models:\n  - name: m\n    router_mode: round-robin\n    workers:\n' +
          '      - { id: 1, url: "http://10.0.0.5:8000" }\n      - { id: 2, url: "http://10.0.0.5:8000/" }\n',
      ),
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['models[0].workers[1].url']).toBe('is the url of workers[0] too; list each engine once');
  });

  it('admin listener rules', () => {
    const p = problemsOf({ file: file('listen: { port: 9000 }\nadmin: { port: 9000 }\n') });
    expect(p.map((x) => x.reason)).toContain('is set but admin.enabled is false');
    expect(p.map((x) => x.reason).some((r) => r.includes("public listener's address"))).toBe(true);
  });

  it('bad flag values name the flag, not the file', () => {
    const path = file(`listen: { port: 9000 }\nmodels:\n  - name: m\n${WORKERS}\n`);
    const flags = parseServeFlags(['-c', path, '--port', '70000', '--log-level', 'loud']);
    const p = problemsOf({ file: flags.configFile, overrides: flags.overrides });
    expect(p).toEqual([
      {
        source: '--port',
        path: 'listen.port',
        reason: 'must be an integer in [0, 65535], got 70000',
        position: undefined,
      },
      {
        source: '--log-level',
        path: 'log.level',
        reason: expect.stringMatching(/must be one of/),
        position: undefined,
      },
    ]);
  });

  it('--model together with models in the file', () => {
    const path = file(`models:\n  - name: m\n${WORKERS}\n`);
    const flags = parseServeFlags(['-c', path, '--model', 'x', '--worker', 'http://a:1']);
    const p = problemsOf({ file: path, overrides: flags.overrides });
    expect(p[0]!.source).toBe('--worker');
  });

  it('unknown flags, missing values and malformed --set / --worker / router flags', () => {
    const bad = [
      ['--prot', '1'],
      ['--port'],
      ['--set', 'no-equals'],
      ['--set', 'a..b=1'],
      ['--worker', 'http://a:1'],
      ['--model', 'm', '--worker', 'url=http://a:1,dp_size'],
      ['--router-temperature', 'hot'],
    ];
    for (const argv of bad) {
      let thrown: unknown;
      try {
        parseServeFlags(argv);
      } catch (err) {
        thrown = err;
      }
      expect(isKvgateError(thrown, 'KVG_ERR_INVALID_CONFIG'), argv.join(' ')).toBe(true);
    }
    expect(() => parseServeFlags(['--router-temperature', 'hot'])).toThrow(/--router-temperature.*expects a number/);
  });

  it('every problem in a file is reported at once', () => {
    const p = problemsOf({
      file: file(
        `listen: { port: -1 }\nlimits: { max_prompt_tokens: 0 }\nlog: { level: x }\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
    });
    expect(p.map((x) => x.path)).toEqual(['listen.port', 'limits.max_prompt_tokens', 'log.level']);
  });
});

describe('config: field paths for --set', () => {
  it('parses dotted paths with indices and rejects malformed ones', () => {
    expect(parseFieldPath('models[0].workers[12].url')).toEqual(['models', 0, 'workers', 12, 'url']);
    expect(parseFieldPath('limits.max_body_bytes')).toEqual(['limits', 'max_body_bytes']);
    for (const bad of ['', '.a', 'a.', 'a..b', '[0]', 'a[x]', 'a b']) expect(parseFieldPath(bad), bad).toBeUndefined();
  });
});

describe('config: duplicates', () => {
  it('a bad global router rule is reported once, not once per model', () => {
    const p = problemsOf({
      file: file(`
router: { router_track_output_blocks: true, router_track_active_blocks: false, use_kv_events: false }
models:
  - name: a
    workers: [{ id: 1, url: "http://a:1" }]
  - name: b
    workers: [{ id: 2, url: "http://b:1" }]
`),
    });
    expect(p.map((x) => x.path)).toEqual(['router.router_track_output_blocks']);
  });
});

describe('config: served_model_name and lora_adapters', () => {
  // issue 12 items 7 and 8
  it('default to the gateway name and none; are handed to every worker of the model', () => {
    const c = loadGatewayConfig({
      file: file(
        `models:\n  - name: llama\n    served_model_name: meta-llama/Llama-3.1-8B-Instruct\n    lora_adapters: [sql-adapter, chat-adapter]\n${WORKERS}\n  - name: plain\n    workers: [{ id: 3, url: "http://p:1", kv_events: "tcp://p:2" }]\n`,
      ),
      env: {},
    });
    const [llama, plain] = c.models;
    expect(llama).toMatchObject({
      servedModelName: 'meta-llama/Llama-3.1-8B-Instruct',
      loraAdapters: ['sql-adapter', 'chat-adapter'],
    });
    expect(llama!.workers[1]).toMatchObject({
      model: 'llama',
      servedModelName: 'meta-llama/Llama-3.1-8B-Instruct',
      loraAdapters: ['sql-adapter', 'chat-adapter'],
    });
    expect(plain).toMatchObject({ servedModelName: 'plain', loraAdapters: [] });
  });

  it('refuses adapter names that are not names, repeat, or collide with a model name', () => {
    const p = problemsOf({
      file: file(
        `models:\n  - name: a\n    lora_adapters: [x, x, a, "has space", 7]\n${WORKERS}\n  - name: b\n    lora_adapters: [a]\n    workers: [{ id: 3, url: "http://p:1", kv_events: "tcp://p:2" }]\n`,
      ),
      env: {},
    });
    expect(p.map((x) => x.path)).toEqual([
      'models[0].lora_adapters[1]',
      'models[0].lora_adapters[2]',
      'models[0].lora_adapters[3]',
      'models[0].lora_adapters[4]',
      'models[1].lora_adapters[0]',
    ]);
    expect(
      problemsOf({ file: file(`models:\n  - name: a\n    served_model_name: "two words"\n${WORKERS}\n`), env: {} })[0]!
        .path,
    ).toBe('models[0].served_model_name');
  });
});

describe('config: client timeouts and the per-client connection bound', () => {
  // issue 13 item 1: the header and body timeouts and the pending-connection bound are limits knobs, validated by field
  it('defaults to tens of seconds and 256 connections, takes values from the file, and names a bad field', () => {
    const d = loadGatewayConfig({ file: file(`models:\n  - name: m\n${WORKERS}\n`), env: {} });
    expect(d.limits).toMatchObject({
      headerTimeoutMs: 30_000,
      bodyTimeoutMs: 30_000,
      maxPendingConnectionsPerClient: 256,
      maxConnectionsPerClient: 2048,
    });
    const c = loadGatewayConfig({
      file: file(
        `limits: { header_timeout_ms: 500, body_timeout_ms: 250, max_pending_connections_per_client: 8 }\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
      env: {},
    });
    expect(c.limits).toMatchObject({ headerTimeoutMs: 500, bodyTimeoutMs: 250, maxPendingConnectionsPerClient: 8 });
    // Unset, the open-connection bound follows the concurrency bound: a proxy in front holds one per stream.
    const wide = loadGatewayConfig({
      file: file(`limits: { max_concurrent_requests: 4096 }\nmodels:\n  - name: m\n${WORKERS}\n`),
      env: {},
    });
    expect(wide.limits.maxConnectionsPerClient).toBe(8192);
    const set = loadGatewayConfig({
      file: file(
        `limits: { max_concurrent_requests: 4096, max_connections_per_client: 100 }\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
      env: {},
    });
    expect(set.limits.maxConnectionsPerClient).toBe(100);
    const p = problemsOf({
      file: file(
        `limits: { header_timeout_ms: 0, body_timeout_ms: "soon", max_pending_connections_per_client: -1 }\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
      env: {},
    });
    const by = Object.fromEntries(p.map((x) => [x.path, x.reason]));
    expect(by['limits.header_timeout_ms']).toMatch(/must be an integer in \[1,/);
    expect(by['limits.body_timeout_ms']).toMatch(/must be an integer .* got "soon"/);
    expect(by['limits.max_pending_connections_per_client']).toMatch(/must be an integer in \[1,/);
  });
});

// issue 13 items 5-7: the KV-event ingestion bounds are gateway config with defaults and field-named errors.
describe('config: kv_events bounds', () => {
  it('defaults, values from the file, and a problem per bad field', () => {
    expect(loadGatewayConfig({ env: {} }).kvEvents).toEqual({
      maxQueuedBatches: 10_000,
      maxPendingBatches: 100_000,
      maxEventsPerTurn: 2000,
      maxTurnMs: 4,
      reorderWindow: 64,
      maxSeqJump: 1_000_000,
      restartConfirmations: 2,
      inconsistentAfterMs: 5000,
      staleAfterMs: 30_000,
      replayTimeoutMs: 2000,
      receiveHighWaterMark: 100_000,
      maxMessageBytes: 64 * 2 ** 20,
      maxReplyBytes: 512 * 2 ** 20,
      maxBatchElements: 2 ** 20,
      maxKvGroups: 16,
    });
    const c = loadGatewayConfig({
      file: file(
        `kv_events:\n  queue_batches: 500\n  turn_budget_ms: 2.5\n  inconsistent_after_ms: 1000\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
      env: {},
    });
    expect(c.kvEvents).toMatchObject({
      maxQueuedBatches: 500,
      maxTurnMs: 2.5,
      inconsistentAfterMs: 1000,
      reorderWindow: 64,
    });
    const problems = problemsOf({
      file: file(
        `kv_events:\n  queue_batches: 0\n  turn_budget_ms: 0\n  reorder_windw: 3\nmodels:\n  - name: m\n${WORKERS}\n`,
      ),
      env: {},
    });
    expect(problems.map((p) => p.path).sort()).toEqual([
      'kv_events.queue_batches',
      'kv_events.reorder_windw',
      'kv_events.turn_budget_ms',
    ]);
  });
});

// issue 15 item 1: the replica sync section and its flags.
describe('config: replicas', () => {
  const base = `models:\n  - name: m\n    tokenizer: none${WORKERS}\n`;
  it('is off by default, and --replica-sync-nats / --router-id turn it on', () => {
    expect(loadGatewayConfig({ file: file(base), overrides: [], env: {} }).replicas.natsServers).toEqual([]);
    const flags = parseServeFlags([
      '--replica-sync-nats',
      'nats://10.0.0.9:4222,nats://10.0.0.10:4222',
      '--router-id',
      '7',
    ]);
    const c = loadGatewayConfig({ file: file(base), overrides: flags.overrides, env: {} });
    expect(c.replicas).toEqual({
      natsServers: ['nats://10.0.0.9:4222', 'nats://10.0.0.10:4222'],
      natsConnection: {
        reconnectTimeWaitMs: 250,
        maxReconnectAttempts: -1,
        pingIntervalMs: 5000,
        maxPingsOut: 2,
        connectTimeoutMs: 20000,
      },
      routerId: '7',
      subjectPrefix: 'kvgate.replicas',
      heartbeatMs: 1000,
      peerTimeoutMs: 5000,
      maxQueuedOps: 65536,
      warmStart: true,
      warmStartTimeoutMs: 5000,
      snapshotChunkBytes: 262144,
      maxSnapshotBytes: 268435456,
    });
  });

  // issue 15 warm start: on by default with NATS, off without; a warm start without NATS is refused by name
  it('warm start is on with NATS and off without; its bounds are validated by field', () => {
    expect(loadGatewayConfig({ file: file(base), overrides: [], env: {} }).replicas.warmStart).toBe(false);
    const c = loadGatewayConfig({
      file: file(
        `${base}replicas: { nats: { servers: ["nats://n:4222"] }, warm_start: false, snapshot_chunk_bytes: 4096 }\n`,
      ),
      overrides: [],
      env: {},
    });
    expect(c.replicas).toMatchObject({ warmStart: false, snapshotChunkBytes: 4096 });
    const problems = problemsOf({
      file: file(
        `${base}replicas: { warm_start: true, warm_start_timeout_ms: 5, snapshot_chunk_bytes: 100, max_snapshot_bytes: 10 }\n`,
      ),
      overrides: [],
      env: {},
    });
    expect(problems.map((p) => p.path).sort()).toEqual([
      'replicas.max_snapshot_bytes',
      'replicas.snapshot_chunk_bytes',
      'replicas.warm_start',
      'replicas.warm_start_timeout_ms',
    ]);
  });

  it('names the field of a bad value', () => {
    const problems = problemsOf({
      file: file(
        `${base}replicas: { nats: { servers: ["http://x:1"] }, heartbeat_ms: 500, peer_timeout_ms: 400, subject_prefix: "a b" }\n`,
      ),
      overrides: [],
      env: {},
    });
    expect(problems.map((p) => p.path)).toEqual([
      'replicas.nats.servers[0]',
      'replicas.peer_timeout_ms',
      'replicas.subject_prefix',
    ]);
  });
  it("reads the NATS connection's reconnect and ping keys; refuses bad values by field", () => {
    const nats = 'servers: ["nats://n:4222"]';
    const c = loadGatewayConfig({
      file: file(
        `${base}replicas: { nats: { ${nats}, reconnect_wait_ms: 1000, max_reconnect_attempts: 0, ping_interval_ms: 200, ` +
          'max_pings_out: 1, connect_timeout_ms: 3000 } }\n',
      ),
      overrides: [],
      env: {},
    });
    expect(c.replicas.natsConnection).toEqual({
      reconnectTimeWaitMs: 1000,
      maxReconnectAttempts: 0,
      pingIntervalMs: 200,
      maxPingsOut: 1,
      connectTimeoutMs: 3000,
    });
    const problems = problemsOf({
      file: file(
        `${base}replicas: { nats: { ${nats}, reconnect_wait_ms: 0, max_reconnect_attempts: -2, ping_interval_ms: "5s", ` +
          'max_pings_out: 0, connect_timeout_ms: 1.5, ping_timeout_ms: 10 } }\n',
      ),
      overrides: [],
      env: {},
    });
    expect(problems.map((p) => p.path).sort()).toEqual([
      'replicas.nats.connect_timeout_ms',
      'replicas.nats.max_pings_out',
      'replicas.nats.max_reconnect_attempts',
      'replicas.nats.ping_interval_ms',
      'replicas.nats.ping_timeout_ms',
      'replicas.nats.reconnect_wait_ms',
    ]);
    expect(problems.find((p) => p.path === 'replicas.nats.max_reconnect_attempts')!.reason).toMatch(/\[-1, /);
  });
});

// issue 15 item 2: `--processes N` and preprocessing threads that do not oversubscribe the cores
describe('processes', () => {
  const worker = ['--model', 'm', '--worker', 'http://a:1', '--router-mode', 'random'];
  it('defaults to 1; --processes and the processes key set it; out of range is a field-named error', () => {
    expect(loadGatewayConfig({ overrides: parseServeFlags(worker).overrides, env: {} }).processes).toBe(1);
    expect(
      loadGatewayConfig({ overrides: parseServeFlags([...worker, '--processes', '3']).overrides, env: {} }).processes,
    ).toBe(3);
    expect(
      loadGatewayConfig({
        file: file(
          'processes: 2\nmodels: [{ name: m, router_mode: random, workers: [{ id: 1, url: "http://a:1" }] }]\n',
        ),
        env: {},
      }).processes,
    ).toBe(2);
    expect(
      problemsOf({ overrides: parseServeFlags([...worker, '--processes', '0']).overrides, env: {} }).map((p) => p.path),
    ).toEqual(['processes']);
  });

  it('shares the spare cores among the processes: N processes run at most cores - 1 preprocessing threads in all', () => {
    const cores = availableParallelism();
    for (const n of [1, 2, 3, 8]) {
      const threads = loadGatewayConfig({
        overrides: parseServeFlags([...worker, '--processes', String(n)]).overrides,
        env: {},
      }).preprocess.threads;
      if (n === 1) expect(threads).toBeGreaterThanOrEqual(1);
      else expect(n * threads).toBeLessThanOrEqual(cores - 1);
    }
    // An explicit count is the operator's.
    expect(
      loadGatewayConfig({
        overrides: parseServeFlags([...worker, '--processes', '2', '--preprocess-threads', '3']).overrides,
        env: {},
      }).preprocess.threads,
    ).toBe(3);
  });
});

// issue 23, section 2: the bound on a chat's messages
describe('limits.max_messages', () => {
  it('defaults to 2,048; takes a value from the file; out of range is a field-named error; a reload applies it', () => {
    const models = `models:\n  - name: m\n${WORKERS}\n`;
    const d = loadGatewayConfig({ file: file(models), env: {} });
    expect(d.limits.maxMessages).toBe(2048);
    const c = loadGatewayConfig({ file: file(`limits: { max_messages: 100000 }\n${models}`), env: {} });
    expect(c.limits.maxMessages).toBe(100_000);
    expect(
      problemsOf({ file: file(`limits: { max_messages: 0 }\n${models}`), env: {} }).map((p) => [p.path, p.reason]),
    ).toEqual([['limits.max_messages', expect.stringMatching(/must be an integer in \[1,/)]]);
    expect(reloadProblems(d, c)).toEqual([]);
    expect(configChanges(d, c)).toContainEqual({ path: 'limits.max_messages', from: 2048, to: 100_000 });
  });
});
