/**
 * Embedding kvgate's KvRouter without the gateway, as an endpoint picker or
 * another gateway would: register workers, feed the prefix index what the
 * engines cache (here one synthetic KV `stored` event), ask for a worker per
 * request, and report each request's lifecycle back so load stays right.
 *
 * Run: npm run build && node dist/examples/embedded-router/main.js
 */
import { pathToFileURL } from 'node:url';
import { KvRouter, promptHashes, type RoutingDecision } from '../../src/index.js';

const BLOCK_SIZE = 16;

/** Routes a few requests and returns the decisions (printing each one's explanation with `log`). */
export function main(log: (line: string) => void = console.log): RoutingDecision[] {
  const router = new KvRouter({ blockSize: BLOCK_SIZE, config: { routerTemperature: 0 } });
  for (const workerId of [101, 102, 103]) router.addWorker(workerId, { maxNumBatchedTokens: 8192 });

  // Worker 102 already caches a 512-token system prompt (what a KV event would say).
  const system = Array.from({ length: 512 }, (_, i) => 1000 + i);
  const cached = promptHashes(system, BLOCK_SIZE);
  router.index.applyStored(102, 0, null, cached.seq, cached.local);

  const explain = (d: RoutingDecision): void => {
    log(
      `${d.requestId} -> worker ${d.workerId} rank ${d.dpRank}: ${d.overlapBlocks}/${d.requiredBlocks} blocks cached`,
    );
    for (const c of d.candidates) {
      log(
        `  worker ${c.workerId}: overlap ${c.overlapBlocks}, prefill ${c.prefillTokens} tokens, decode ${c.decodeBlocks} blocks, cost ${c.cost.toFixed(2)}`,
      );
    }
  };

  const decisions: RoutingDecision[] = [];
  const user = (n: number, salt: number): number[] => Array.from({ length: n }, (_, i) => 50_000 + salt * 1000 + i);
  // Two chats on the cached system prompt and one unrelated prompt.
  for (const [requestId, tokens] of [
    ['chat-1', [...system, ...user(200, 1)]],
    ['chat-2', [...system, ...user(300, 2)]],
    ['other', user(700, 3)],
  ] as const) {
    const d = router.findBestMatch({ requestId, tokens });
    explain(d);
    decisions.push(d);
    // ... dispatch to the chosen worker here; when its first token arrives:
    router.markPrefillCompleted(requestId);
  }

  // Stage 1 of a two-stage picker: ask without booking anything.
  const peek = router.findBestMatch({ requestId: 'peek', tokens: [...system, ...user(100, 4)] }, { mode: 'query' });
  log(`query-only: would pick worker ${peek.workerId} (booked: ${peek.booked})`);
  decisions.push(peek);

  // When each response ends (done, error or client gone), free it.
  for (const d of decisions) if (d.booked) router.free(d.requestId);
  log(
    `after free: ${router
      .loads()
      .map((l) => `${l.workerId}:${l.activeRequests}`)
      .join(' ')}`,
  );
  return decisions;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main();
