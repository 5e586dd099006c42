/**
 * The entry of a KV-event ingestion thread (compiled to dist/workers/kv-ingest.js, which
 * src/events/ingest-pool.ts starts): `runIngestThread` hands every request from the main thread to the
 * thread's `IngestThread` and every report back, packed batches moved rather than copied, and ends the
 * thread with its sockets closed, whether the pool stops it or it fails (src/events/ingest-thread-runtime.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runIngestThread, type IngestThreadData } from '../src/events/ingest-thread-runtime.js';

runIngestThread(parentPort!, workerData as IngestThreadData | undefined);
