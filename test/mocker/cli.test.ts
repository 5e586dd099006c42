/** `kvgate mocker`: flag parsing, consecutive ports, one JSON line per engine. */
import { describe, expect, it } from 'vitest';
import { MOCKER_HELP as HELP, parseMockerArgs, startMockers } from '../../src/cli/mocker.js';
import { SUBCOMMANDS } from '../../src/cli/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { demoTokenizerFiles, resolveTokenizerFiles } from '../../src/tokenizer/index.js';

describe('kvgate mocker', () => {
  it('is a registered subcommand', async () => {
    expect(SUBCOMMANDS.mocker).toBeDefined();
    expect(typeof (await SUBCOMMANDS.mocker!.load()).run).toBe('function');
  });

  it('keeps --tokenizer-config beside --tokenizer demo (the demo vocabulary with another chat template)', () => {
    const plan = parseMockerArgs(['--tokenizer', 'demo', '--tokenizer-config', '/tmp/other_tokenizer_config.json']);
    expect(plan.engines[0]!.tokenizer).toEqual({
      tokenizerJson: 'demo',
      tokenizerConfig: '/tmp/other_tokenizer_config.json',
    });
    expect(resolveTokenizerFiles(plan.engines[0]!.tokenizer)).toEqual({
      tokenizerJson: demoTokenizerFiles().tokenizerJson,
      tokenizerConfig: '/tmp/other_tokenizer_config.json',
    });
    expect(parseMockerArgs(['--tokenizer', 'demo']).engines[0]!.tokenizer).toBe('demo');
  });

  it('gives engine i port + i, and rank r of engine i the event port + i*dp_size + r', () => {
    const plan = parseMockerArgs([
      '--count',
      '3',
      '--port',
      '9000',
      '--kv-events-port',
      '6000',
      '--kv-events-replay-port',
      '7000',
      '--dp-size',
      '2',
      '--bootstrap-port',
      '8100',
      '--engine',
      'sglang',
    ]);
    expect(plan.engines.map((e) => [e.port, e.kvEventsPort, e.kvEventsReplayPort, e.bootstrapPort])).toEqual([
      [9000, 6000, 7000, 8100],
      [9001, 6002, 7002, 8101],
      [9002, 6004, 7004, 8102],
    ]);
    expect(plan.engines[0]).toMatchObject({ dpSize: 2, engine: 'sglang', kvEvents: true });
  });

  it("defaults to the engines' usual ports; 0 stays OS-chosen for every engine", () => {
    const d = parseMockerArgs([]);
    expect(d.engines).toHaveLength(1);
    expect(d.engines[0]).toMatchObject({
      port: 8000,
      kvEventsPort: 5557,
      bootstrapPort: 8998,
      kvEventsReplayPort: undefined,
    });
    const z = parseMockerArgs(['--count', '2', '--port', '0', '--kv-events-port', '0']);
    expect(z.engines.map((e) => [e.port, e.kvEventsPort])).toEqual([
      [0, 0],
      [0, 0],
    ]);
  });

  it('maps every flag to an option', () => {
    const [e] = parseMockerArgs([
      '--host',
      '0.0.0.0',
      '--model',
      'm',
      '--lora',
      'a',
      '--lora',
      'b',
      '--mode',
      'decode',
      '--num-gpu-blocks',
      '64',
      '--block-size',
      '32',
      '--max-num-batched-tokens',
      '512',
      '--max-num-seqs',
      '8',
      '--max-model-len',
      '1024',
      '--speedup',
      '4',
      '--perf-profile',
      'h100',
      '--no-kv-events',
      '--kv-events-encoding',
      'array',
      '--kv-events-topic',
      't',
      '--kv-events-buffer-steps',
      '10',
      '--bootstrap-timeout-ms',
      '500',
      '--kv-bytes-per-token',
      '1000',
      '--kv-transfer-bandwidth',
      '10',
      '--kv-lease-ms',
      '99',
      '--seed',
      '5',
      '--engine-hash-seed',
      '18446744073709551615',
      '--tokenizer',
      'demo',
      '--default-max-tokens',
      '7',
      '--fault-hang',
      '--fault-slow-factor',
      '2',
      '--fault-error-rate',
      '0.1',
      '--fault-drop-event-rate',
      '0.2',
      '--fault-reorder-events',
    ]).engines;
    expect(e).toMatchObject({
      host: '0.0.0.0',
      model: 'm',
      loraNames: ['a', 'b'],
      mode: 'decode',
      numGpuBlocks: 64,
      blockSize: 32,
      maxNumBatchedTokens: 512,
      maxNumSeqs: 8,
      maxModelLen: 1024,
      speedup: 4,
      perfProfile: 'h100',
      kvEvents: false,
      kvEventsEncoding: 'array',
      kvEventsTopic: 't',
      kvEventsBufferSteps: 10,
      bootstrapTimeoutMs: 500,
      kvBytesPerToken: 1000,
      kvTransferBandwidthGBps: 10,
      kvLeaseMs: 99,
      seed: 5,
      engineHashSeed: 18446744073709551615n,
      tokenizer: 'demo',
      defaultMaxTokens: 7,
      faults: { hang: true, slowFactor: 2, errorRate: 0.1, dropEventRate: 0.2, reorderEvents: true },
    });
    for (const flag of ['--count', '--port', '--dp-size', '--speedup']) expect(HELP).toContain(flag);
  });

  it('rejects unknown flags and bad numbers with KVG_ERR_INVALID_CONFIG', () => {
    for (const argv of [['--bogus'], ['--count', '0'], ['--port', 'abc'], ['--engine-hash-seed', 'x']]) {
      let err: unknown;
      try {
        parseMockerArgs(argv);
      } catch (e) {
        err = e;
      }
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    }
  });

  it('starts N engines and prints one JSON line each with its ports', async () => {
    const lines: string[] = [];
    const handles = await startMockers(
      parseMockerArgs([
        '--count',
        '2',
        '--port',
        '0',
        '--kv-events-port',
        '0',
        '--kv-events-replay-port',
        '0',
        '--speedup',
        '10',
      ]),
      (l) => lines.push(l),
    );
    try {
      expect(lines).toHaveLength(2);
      const info = lines.map((l) => JSON.parse(l));
      expect(info.map((i) => i.index)).toEqual([0, 1]);
      expect(info[0].port).not.toBe(info[1].port);
      for (const i of info) {
        expect(i.url).toBe(`http://127.0.0.1:${i.port}`);
        expect(i.kv_events).toEqual([`tcp://127.0.0.1:${i.kv_events_ports[0]}`]);
        expect(i.kv_events_replay_ports).toHaveLength(1);
        expect(i).toMatchObject({
          model: 'mock-model',
          engine: 'vllm',
          mode: 'aggregated',
          dp_size: 1,
          block_size: 16,
          timing_model: 'polynomial',
          bootstrap_port: null,
        });
        expect((await fetch(`${i.url}/health`)).status).toBe(200);
      }
    } finally {
      await Promise.all(handles.map((h) => h.close()));
    }
  });

  it('a failing engine start closes the ones already started', async () => {
    const lines: string[] = [];
    await expect(
      startMockers(
        parseMockerArgs(['--count', '2', '--port', '0', '--kv-events-port', '0', '--mode', 'nonsense']),
        (l) => lines.push(l),
      ),
    ).rejects.toThrow(/mode=nonsense/);
    expect(lines).toHaveLength(0);
  });
});
