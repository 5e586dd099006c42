/**
 * The entry of a KV-event ingestion thread (compiled to dist/workers/kv-ingest.js, which
 * src/events/ingest-pool.ts starts): every request from the main thread goes to the thread's
 * `IngestThread`, every report goes back, packed batches moved rather than copied.
 */
import { parentPort } from 'node:worker_threads';
import { IngestThread, type IngestRequest } from '../src/events/ingest-thread.js';

const port = parentPort!;
const thread = new IngestThread((report, transfer) => port.postMessage(report, transfer));
port.on('message', (req: IngestRequest) => thread.handle(req));
