/**
 * `router_preset` in the gateway config: a named preset of core's table resolves to its knobs, per model
 * or as the global default; a knob the operator sets explicitly wins over the preset's; an unknown name
 * is refused at load with its file position and a did-you-mean; a preset change is a reloadable change.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  configChanges,
  loadGatewayConfig,
  parseServeFlags,
  reloadProblems,
  type ConfigProblem,
  type GatewayConfig,
} from '../../src/config/index.js';
import { KV_ROUTER_DEFAULTS, resolveKvRouterConfig, type KvRouterConfig } from '../../src/core/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-preset-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function file(text: string): string {
  const path = join(dir, `c${n++}.yaml`);
  writeFileSync(path, text);
  return path;
}

const WORKERS = `
    workers:
      - { id: 1, url: "http://10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }`;

/** The config of one model `m` with `global` as the top-level router section and `local` as its own. */
function load(global: string | undefined, local: string | undefined): GatewayConfig {
  const text = [
    ...(global !== undefined ? [`router: ${global}`] : []),
    'models:',
    '  - name: m',
    ...(local !== undefined ? [`    router: ${local}`] : []),
    WORKERS,
  ].join('\n');
  return loadGatewayConfig({ file: file(text) });
}

function problemsOf(text: string): ConfigProblem[] {
  try {
    loadGatewayConfig({ file: file(text) });
  } catch (err) {
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    return (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
  }
  throw new Error('expected the config to be rejected');
}

// Written out here, not read from the table under test: what each preset must mean to an operator.
const EXPECTED: Record<string, Partial<KvRouterConfig>> = {
  kv: {},
  dynamo: {
    overlapScoreCredit: 1,
    prefillLoadScale: 1,
    decodeActiveRequestWeight: 0,
    routerKvPressureWeight: 0,
    routerKvOverflowWeight: 0,
  },
  'dynamo-agentic': {
    overlapScoreCredit: 2,
    prefillLoadScale: 4,
    decodeActiveRequestWeight: 64,
    routerKvPressureWeight: 0,
    routerKvOverflowWeight: 0,
  },
  'llm-d': { routerPrefixScorerWeight: 2, routerQueueScorerWeight: 2, routerKvUtilizationScorerWeight: 1 },
  lmetric: { routerLmetric: true },
};

describe('config: router_preset', () => {
  it.each(Object.keys(EXPECTED))('a model with router_preset %s gets exactly that preset over the defaults', (name) => {
    const model = load(undefined, `{ router_preset: ${name} }`).models[0]!;
    expect(model.routerPreset).toBe(name);
    expect(model.router).toEqual(resolveKvRouterConfig(EXPECTED[name]));
  });

  it('no preset anywhere is kv: the defaults', () => {
    const model = load(undefined, undefined).models[0]!;
    expect(model.routerPreset).toBe('kv');
    expect(model.router).toEqual(KV_ROUTER_DEFAULTS);
  });

  it('the global section sets the default preset; a model may name another', () => {
    const text = [
      'router: { router_preset: dynamo-agentic }',
      'models:',
      '  - name: a',
      WORKERS,
      '  - name: b',
      '    router: { router_preset: lmetric }',
      '    workers: [{ id: 2, url: "http://10.0.0.2:8000", kv_events: "tcp://10.0.0.2:5557" }]',
    ].join('\n');
    const [a, b] = loadGatewayConfig({ file: file(text) }).models;
    expect([a!.routerPreset, a!.router.prefillLoadScale, a!.router.decodeActiveRequestWeight]).toEqual([
      'dynamo-agentic',
      4,
      64,
    ]);
    // The model's preset replaces the global one: none of dynamo-agentic's knobs leak into b.
    expect(b!.routerPreset).toBe('lmetric');
    expect(b!.router).toEqual(resolveKvRouterConfig({ routerLmetric: true }));
  });

  it('a knob set explicitly wins over the preset, in the same section or the global one', () => {
    const same = load(undefined, '{ router_preset: dynamo-agentic, prefill_load_scale: 2 }').models[0]!;
    expect(same.router).toEqual(resolveKvRouterConfig({ ...EXPECTED['dynamo-agentic'], prefillLoadScale: 2 }));
    const global = load('{ router_kv_pressure_weight: 0.5 }', '{ router_preset: dynamo }').models[0]!;
    expect(global.router.routerKvPressureWeight).toBe(0.5);
    expect(global.routerPreset).toBe('dynamo');
    const temperature = load('{ router_preset: llm-d }', '{ router_temperature: 0.3 }').models[0]!;
    expect(temperature.router).toEqual(resolveKvRouterConfig({ ...EXPECTED['llm-d'], routerTemperature: 0.3 }));
  });

  it('refuses an unknown preset at load, with its position and a did-you-mean', () => {
    const p = problemsOf(
      [
        'router: { router_preset: dynamo_agentic }',
        'models:',
        '  - name: m',
        '    router:',
        '      router_preset: lmetrik',
        WORKERS,
      ].join('\n'),
    );
    const global = p.find((x) => x.path === 'router.router_preset');
    expect(global?.reason).toMatch(/^must be one of kv, dynamo, dynamo-agentic, llm-d, lmetric; got "dynamo_agentic"/);
    expect(global?.reason).toMatch(/\(did you mean "dynamo-agentic"\?\)$/);
    expect(global?.position).toBe('1:11');
    const local = p.find((x) => x.path === 'models[0].router.router_preset');
    expect(local?.reason).toMatch(/got "lmetrik" \(did you mean "lmetric"\?\)$/);
    expect(local?.position).toBe('5:7');
    // A non-string value is refused too, without a hint.
    const typed = problemsOf(['router: { router_preset: 3 }', 'models:', '  - name: m', WORKERS].join('\n'));
    expect(typed.find((x) => x.path === 'router.router_preset')?.reason).toBe(
      'must be one of kv, dynamo, dynamo-agentic, llm-d, lmetric; got 3',
    );
  });

  it('a misspelt key beside the knobs is told the preset key', () => {
    const p = problemsOf(['models:', '  - name: m', '    router: { router_prest: kv }', WORKERS].join('\n'));
    expect(p.find((x) => x.path === 'models[0].router.router_prest')?.reason).toMatch(
      /unknown router knob \(did you mean "router_preset"\?\)/,
    );
  });

  it('a preset change is reloadable, and the reload reports the preset and the knobs it moved', () => {
    const before = load(undefined, '{ router_preset: dynamo }');
    const after = load(undefined, '{ router_preset: dynamo-agentic }');
    expect(reloadProblems(before, after)).toEqual([]);
    const paths = configChanges(before, after).map((c) => c.path);
    expect(paths).toEqual(
      expect.arrayContaining([
        'models[0].router.router_preset',
        'models[0].router.overlap_score_credit',
        'models[0].router.prefill_load_scale',
        'models[0].router.decode_active_request_weight',
      ]),
    );
    expect(configChanges(before, after).find((c) => c.path === 'models[0].router.router_preset')).toEqual({
      path: 'models[0].router.router_preset',
      from: 'dynamo',
      to: 'dynamo-agentic',
    });
  });
});

describe('kvgate serve --router-preset', () => {
  it('sets the preset of every model, beating the file, under the knobs set explicitly', () => {
    const path = file(
      [
        'models:',
        '  - name: a',
        '    router: { router_preset: lmetric, prefill_load_scale: 2 }',
        WORKERS,
        '  - name: b',
        '    workers: [{ id: 2, url: "http://10.0.0.2:8000", kv_events: "tcp://10.0.0.2:5557" }]',
      ].join('\n'),
    );
    const flags = parseServeFlags(['-c', path, '--router-preset', 'dynamo-agentic']);
    const [a, b] = loadGatewayConfig({ file: path, overrides: flags.overrides }).models;
    expect([a!.routerPreset, b!.routerPreset]).toEqual(['dynamo-agentic', 'dynamo-agentic']);
    expect(a!.router).toEqual(resolveKvRouterConfig({ ...EXPECTED['dynamo-agentic'], prefillLoadScale: 2 }));
    expect(b!.router).toEqual(resolveKvRouterConfig(EXPECTED['dynamo-agentic']));
  });

  it('refuses an unknown name, naming the flag', () => {
    const flags = parseServeFlags([
      '--model',
      'm',
      '--worker',
      'url=http://a:1,kv_events=tcp://a:2',
      '--router-preset',
      'dynamoo',
    ]);
    try {
      loadGatewayConfig({ overrides: flags.overrides, env: {} });
      throw new Error('expected the config to be rejected');
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      const p = (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
      expect(p).toEqual([
        expect.objectContaining({
          source: '--router-preset',
          path: 'models[0].router.router_preset',
          reason: expect.stringMatching(/got "dynamoo" \(did you mean "dynamo"\?\)$/),
        }),
      ]);
    }
  });
});
