/**
 * `kvgate replay --scenario conditional-disagg`: the conditional-disaggregation comparison (src/replay's
 * `disagg-policies.ts`). One seeded mixed workload (short chats, long documents) on one P/D fleet, replayed offline
 * under each `disagg_policy` (always, never, input_length, prefill_load, either); prints one table row per policy.
 * Engine flags are the mocker's, as for a trace replay.
 */
import { parseCommandArgs } from '../config/index.js';
import { replayEngineOptions } from '../replay/index.js';
import {
  DISAGG_PROTOCOLS,
  MIXED_DEFAULTS,
  disaggPolicies,
  mixedWorkload,
  renderDisaggTable,
  runDisaggScenario,
  type DisaggProtocol,
} from '../replay/index.js';
import { OPTIONS as MOCKER_OPTIONS } from './mocker.js';
import { commandLine, engineFlags, integer, NOT_FORWARDED, positiveNumber, usageError } from './replay.js';

const OWN_OPTIONS = {
  scenario: { type: 'string' },
  seed: { type: 'string' },
  requests: { type: 'string' },
  rate: { type: 'string' },
  'doc-share': { type: 'string' },
  'prefill-workers': { type: 'string' },
  'decode-workers': { type: 'string' },
  'disagg-protocol': { type: 'string' },
  'min-input-tokens': { type: 'string' },
  'max-prefill-load-tokens': { type: 'string' },
  'engine-speedup': { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const REPLAY_DISAGG_HELP = `usage: kvgate replay --scenario conditional-disagg [options]

Replays one seeded mixed workload (short chats behind a shared system prompt, long documents asked about again
and again) offline on a P/D fleet under each disagg_policy, with the KV policy on both pools, and prints a table:
TTFT and ITL (mean, p99), throughput, and the share of requests disaggregated.

  --seed N                       workload, tokens and routers (default ${MIXED_DEFAULTS.seed})
  --requests N                   requests (default ${MIXED_DEFAULTS.requests})
  --rate R                       mean arrivals per second, Poisson (default ${MIXED_DEFAULTS.ratePerS})
  --doc-share F                  fraction of long-document requests (default ${MIXED_DEFAULTS.docShare})
  --prefill-workers N            prefill engines (default 2)
  --decode-workers N             decode engines, each able to serve a request whole (default 2)
  --disagg-protocol P            ${DISAGG_PROTOCOLS.join(' | ')} (default kv_transfer_params)
  --min-input-tokens N           input_length and either: the bound (default 1024)
  --max-prefill-load-tokens N    prefill_load and either: the bound (default 4096)
  --json                         print the rows as JSON
  engine flags                   as kvgate mocker's (--perf-profile h100, --num-gpu-blocks N, ...)
`;

interface Plan {
  readonly json: boolean;
  readonly options: Parameters<typeof runDisaggScenario>[0];
}

function parse(argv: string[]): Plan | 'help' {
  const forwarded = Object.fromEntries(Object.entries(MOCKER_OPTIONS).filter(([k]) => !NOT_FORWARDED.has(k)));
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    values = parseCommandArgs(argv, { ...forwarded, ...OWN_OPTIONS });
  } catch (err) {
    throw usageError((err as Error).message);
  }
  if (values.help === true) return 'help';
  const s = (k: string): string | undefined => values[k] as string | undefined;
  if (s('scenario') !== 'conditional-disagg')
    throw usageError(`--scenario ${s('scenario')}: expected conditional-disagg`);
  const protocol = (s('disagg-protocol') ?? 'kv_transfer_params') as DisaggProtocol;
  if (!DISAGG_PROTOCOLS.includes(protocol))
    throw usageError(`--disagg-protocol ${protocol}: expected ${DISAGG_PROTOCOLS.join(' or ')}`);
  const share = s('doc-share') === undefined ? MIXED_DEFAULTS.docShare : Number(s('doc-share'));
  if (!(share >= 0 && share <= 1)) throw usageError(`--doc-share ${s('doc-share')}: expected a number in [0, 1]`);
  const seed = integer('seed', s('seed'), 0) ?? MIXED_DEFAULTS.seed;
  const workload = mixedWorkload({
    ...MIXED_DEFAULTS,
    seed,
    requests: integer('requests', s('requests'), 1) ?? MIXED_DEFAULTS.requests,
    ratePerS: positiveNumber('rate', s('rate')) ?? MIXED_DEFAULTS.ratePerS,
    docShare: share,
  });
  const minInput = integer('min-input-tokens', s('min-input-tokens'), 0) ?? 1024;
  const maxLoad = integer('max-prefill-load-tokens', s('max-prefill-load-tokens'), 0) ?? 4096;
  return {
    json: values.json === true,
    options: {
      workload,
      policies: disaggPolicies(minInput, maxLoad),
      prefillWorkers: integer('prefill-workers', s('prefill-workers'), 1) ?? 2,
      decodeWorkers: integer('decode-workers', s('decode-workers'), 1) ?? 2,
      protocol,
      engine: replayEngineOptions(engineFlags(values, forwarded), seed),
      seed,
    },
  };
}

export async function replayDisaggCommand(argv: string[]): Promise<number> {
  let plan: Plan | 'help';
  try {
    plan = parse(argv);
  } catch (err) {
    process.stderr.write(`kvgate replay: ${(err as Error).message}\n\nRun \`kvgate replay --scenario x --help\`.\n`);
    return 2;
  }
  if (plan === 'help') {
    process.stdout.write(REPLAY_DISAGG_HELP);
    return 0;
  }
  try {
    const rows = await runDisaggScenario({
      ...plan.options,
      onProgress: (policy, done, total) => {
        if (done === total) process.stderr.write(`kvgate replay: ${policy}: ${total} requests replayed\n`);
      },
    });
    if (plan.json) {
      const out = rows.map(({ run: _run, ...row }) => row);
      process.stdout.write(`${JSON.stringify({ command: commandLine(argv), rows: out }, null, 2)}\n`);
    } else process.stdout.write(renderDisaggTable(rows));
    return 0;
  } catch (err) {
    process.stderr.write(`kvgate replay: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}
