/**
 * `npm run bench [-- filter...]`: runs every registered bench module (or those
 * whose key contains a filter) and prints Markdown sections for BENCHMARKS.md.
 */
import { cpus, totalmem } from 'node:os';
import { renderSection, type BenchModule } from './util.js';

const MODULES: Record<string, () => Promise<BenchModule>> = {
  'wasm/hashing': () => import('./wasm/hashing.bench.js'),
  'wasm/prefix-index': () => import('./wasm/prefix-index.bench.js'),
  'wasm/shards': () => import('./wasm/shards.bench.js'),
  'wasm/id-array': () => import('./wasm/id-array.bench.js'),
  'events/ingest': () => import('./events/ingest.bench.js'),
  'events/flood-lag': () => import('./events/flood-lag.bench.js'),
  'events/e2e': () => import('./events/e2e.bench.js'),
  'events/handover': () => import('./events/handover.bench.js'),
  'routing/event-hooks': () => import('./routing/event-hooks.bench.js'),
  'routing/kv-router': () => import('./routing/kv-router.bench.js'),
  'routing/decision-pause': () => import('./routing/decision-pause.bench.js'),
  'routing/in-flight': () => import('./routing/in-flight.bench.js'),
  'routing/added-latency': () => import('./routing/added-latency.bench.js'),
  'engines/sse-parser': () => import('./engines/sse-parser.bench.js'),
  'frontend/preprocess': () => import('./frontend/preprocess.bench.js'),
  'frontend/agent-turn': () => import('./frontend/agent-turn.bench.js'),
  'frontend/forward-body': () => import('./frontend/forward-body.bench.js'),
  'tokenizer/render': () => import('./tokenizer/render.bench.js'),
  'frontend/body-parse': () => import('./frontend/body-parse.bench.js'),
  'frontend/tool-numbers': () => import('./frontend/tool-numbers.bench.js'),
  'tokenizer/tool-calls': () => import('./tokenizer/tool-calls.bench.js'),
  'tokenizer/encode': () => import('./tokenizer/encode.bench.js'),
  'gateway/throughput': () => import('./gateway/throughput.bench.js'),
  'mocker/engine': () => import('./mocker/engine.bench.js'),
  'replay/offline': () => import('./replay/offline.bench.js'),
  'replay/quality': () => import('./replay/quality.bench.js'),
  'replay/agentic': () => import('./replay/agentic.bench.js'),
};

async function main(): Promise<void> {
  const filters = process.argv.slice(2);
  const keys = Object.keys(MODULES).filter((k) => filters.length === 0 || filters.some((f) => k.includes(f)));
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  process.stdout.write(
    `# kvgate bench\n\nmachine: ${cpus().length} x ${cpu}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}\n\n`,
  );
  for (const key of keys) {
    const mod = await MODULES[key]!();
    process.stderr.write(`running ${key}...\n`);
    const section = await mod.run();
    process.stdout.write(`${renderSection(section)}\n\n`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exitCode = 1;
});
