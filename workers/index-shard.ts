/**
 * The entry of one shard of a `ShardedPrefixIndex` (compiled to dist/workers/index-shard.js, which
 * src/wasm/sharded-index.ts starts): its shared regions come in `workerData`, every request goes to
 * the thread's `IndexShard`, every reply goes back; matches never pass through here (shared memory).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { IndexShard, type ShardRegions, type ShardRequest } from '../src/wasm/index-shard.js';

const port = parentPort!;
const shard = new IndexShard(workerData as ShardRegions, (reply) => port.postMessage(reply));
port.on('message', (req: ShardRequest) => shard.handle(req));
