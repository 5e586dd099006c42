/**
 * The library's faces, pinned (as fastify pins its surface): every name each
 * package entry point exports, values and types apart. A name added or
 * removed is a change to what users import, made on purpose: update the list
 * here with it, and the CHANGELOG.
 */
import { describe, expect, it } from 'vitest';
import ts from 'typescript';

const ROOT = new URL('../../', import.meta.url).pathname;

/** The entry points of package.json's `exports`, by their source file. */
const ENTRIES = { kvgate: 'src/index.ts', 'kvgate/gateway': 'src/gateway.ts' } as const;

/** What each entry point exports, as the type checker sees it (re-exports followed). */
function exportsOf(files: readonly string[]): Map<string, { values: string[]; types: string[] }> {
  const program = ts.createProgram(
    files.map((f) => ROOT + f),
    { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true },
  );
  const checker = program.getTypeChecker();
  const out = new Map<string, { values: string[]; types: string[] }>();
  for (const f of files) {
    const values: string[] = [];
    const types: string[] = [];
    for (const e of checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(ROOT + f)!)!)) {
      const target = e.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(e) : e;
      (target.flags & ts.SymbolFlags.Value ? values : types).push(e.name);
    }
    out.set(f, { values: values.sort(), types: types.sort() });
  }
  return out;
}

describe('the export list of each entry point', () => {
  const found = exportsOf(Object.values(ENTRIES));

  it('kvgate: the router, the scheduler, hashing and the prefix index, KV-event decoding, errors', () => {
    expect(found.get(ENTRIES.kvgate)).toEqual({
      values: [
        'ActiveSequences',
        'ApproximateIndex',
        'BLOCK_HASH_SEED',
        'ERROR_CODES',
        'KV_ROUTER_CONFIG_FIELDS',
        'KV_ROUTER_DEFAULTS',
        'KvRouter',
        'KvScheduler',
        'KvgateError',
        'ManualClock',
        'PrefixIndex',
        'RoutingDecision',
        'blockHashes',
        'decodeKvEventBatch',
        'isKvgateError',
        'kvEventsEnabled',
        'kvRouterOptionsFromDynamo',
        'outputBlockDecay',
        'parseRouterConfigOverride',
        'promptHashes',
        'rejectionError',
        'requestSeed',
        'resolveKvRouterConfig',
        'resolvePin',
        'seededRng',
        'sequenceHashes',
        'silentLogger',
        'systemClock',
        'xxh3',
      ],
      types: [
        'ActiveRequestInfo',
        'AdmissionResult',
        'ApproximateIndexOptions',
        'BlockHashOptions',
        'CancelSignal',
        'CandidateBreakdown',
        'Clock',
        'DecisionTiming',
        'EngineDialect',
        'KvCacheEvent',
        'KvEventBatch',
        'KvRouteRequest',
        'KvRouterConfig',
        'KvRouterOptions',
        'KvSchedulerOptions',
        'KvgateErrorCode',
        'Logger',
        'OverlapScores',
        'PromptHashes',
        'QueueDepthTier',
        'QueuePolicy',
        'QueueTicket',
        'Rejection',
        'RemoveResult',
        'Rng',
        'RouterConfigOverride',
        'RouterMode',
        'RoutingConstraints',
        'RoutingHints',
        'ScheduleOutcome',
        'SchedulingRequest',
        'SelectionMode',
        'SessionHint',
        'SlotLoad',
        'WorkerCapacity',
        'WorkerLoad',
        'WorkerPin',
        'WorkerRank',
        'WorkerRole',
        'WorkerSummary',
      ],
    });
  });

  it('kvgate/gateway: what kvgate serve is built from', () => {
    expect(found.get(ENTRIES['kvgate/gateway'])).toEqual({
      values: [
        'EngineClient',
        'HealthProber',
        'KvEventApplier',
        'KvEventManager',
        'KvgateMetrics',
        'ModelRouter',
        'PrefillRouter',
        'PushRouter',
        'TieredPrefixIndex',
        'WorkerRegistry',
        'createSimpleRouter',
        'loadGatewayConfig',
        'makeRouterContext',
        'startGateway',
        'startMocker',
      ],
      types: [
        'EngineClientOptions',
        'Gateway',
        'GatewayConfig',
        'GatewayOptions',
        'KvEventEndpoints',
        'KvEventHooks',
        'LoadSource',
        'MockerHandle',
        'MockerInput',
        'ModelConfig',
        'ModelRouterOptions',
        'ModelRouterPort',
        'PrefillRouterOptions',
        'PreparedRequest',
        'PushRouterOptions',
        'QueryResult',
        'RoutedResponse',
        'RouterContext',
        'SimpleRouter',
        'WorkerConfig',
        'WorkerInfo',
      ],
    });
  });

  it('package.json maps each entry point to its compiled file', async () => {
    const pkg = (await import(ROOT + 'package.json', { with: { type: 'json' } })).default as {
      exports: Record<string, { types: string; default: string }>;
    };
    expect(Object.keys(pkg.exports).sort()).toEqual(['.', './gateway']);
    expect(pkg.exports['.']!.default).toBe('./dist/src/index.js');
    expect(pkg.exports['./gateway']!.default).toBe('./dist/src/gateway.js');
  });
});
