/**
 * HTTP latency probe for the flood bench, in a worker thread (its own event
 * loop, so what it measures is the server's responsiveness, not its own lag):
 * GETs `url` every `intervalMs` from 'start' until 'stop', then posts the
 * latencies in ms (including the request in flight at 'stop').
 */
import { request } from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';

interface ProberConfig {
  url: string;
  intervalMs: number;
}

const cfg = workerData as ProberConfig;
const port = parentPort!;
const latencies: number[] = [];
let running = false;
let looping: Promise<void> = Promise.resolve();

function once(): Promise<void> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = request(cfg.url, { agent: false }, (res) => {
      res.resume();
      res.once('end', () => {
        latencies.push(performance.now() - t0);
        resolve();
      });
    });
    req.once('error', () => resolve());
    req.end();
  });
}

async function loop(): Promise<void> {
  while (running) {
    const next = performance.now() + cfg.intervalMs;
    await once();
    const wait = next - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
}

port.on('message', (msg: string) => {
  if (msg === 'start') {
    running = true;
    looping = loop();
  } else if (msg === 'stop') {
    running = false;
    // The request in flight counts too: under a stalled server it is the slowest one.
    void looping.then(() => {
      port.postMessage(latencies);
      port.close();
    });
  }
});
