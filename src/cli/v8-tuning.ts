/**
 * V8 settings for a kvgate process, applied by the `kvgate` launcher
 * (bin/kvgate.js) before any other module of kvgate loads, so no code is
 * compiled and no allocation site is created under V8's defaults first.
 *
 * Allocation-site pretenuring off. V8 learns, per allocation site (an object
 * or array literal), to allocate straight in the old generation once enough of
 * the site's objects survive a young-generation collection. A gateway's
 * per-request objects (the engine response's handler, headers and stream
 * state) live a few milliseconds, but at thousands of requests per second
 * enough of them are alive at every scavenge for V8 to pretenure their sites.
 * They then die in the old generation: it fills at about 70 MB/s and needs a
 * full mark-compact every second, and each scavenge takes twice as long. Off,
 * CPU per tiny request falls by about a fifth (docs/benchmarks-history.md,
 * "the fourth round"). `KVGATE_V8_PRETENURING=on` keeps V8's default.
 *
 * The heap's growing factor fixed at 4 (`--heap-growing-percent=300`). After
 * a full collection V8 sets the next one's limit from the live heap times a
 * growing factor it picks between 1.1 and 4, by how fast the isolate
 * allocates against how fast it collects. kvgate's isolates allocate little on
 * the heap (request bodies, token ids and hashes are buffers and typed arrays
 * off it), so V8 picks 1.1, and on a heap as small as the main thread's (about
 * 27 MB live) that leaves so little room that it starts the next marking at
 * once (`--trace-incremental-marking`: "Start (task)" with 24 MB of slack).
 * Under agents' 128k-token follow-ups the main thread then ran a full
 * collection every 150 to 500 ms, each about 100 ms of CPU (mostly concurrent
 * marking, which `nodejs_gc_duration_seconds` does not show), each freeing
 * about 1 MB; with the factor at 4 it ran none between its first and the end of
 * the run, and a turn's gateway CPU fell by a third (BENCHMARKS.md, "Agents in
 * steady state"). The price is memory: a heap may hold up to three times its
 * live size in garbage before it is collected (the resident set read 10 %
 * higher in that run). The factor is V8's own upper bound, and the flag is read
 * at every collection, so it holds for the main thread and every worker thread.
 * `KVGATE_V8_HEAP_GROWING_PERCENT=<n>` sets another (`0` keeps V8's choice).
 *
 * Library users run their own process: kvgate never changes V8's flags for
 * them (they can pass `--no-allocation-site-pretenuring` and
 * `--heap-growing-percent=300` to node).
 */
import { setFlagsFromString } from 'node:v8';

/** The heap's growing factor, as V8's percent over 1 (300: the limit is four times the live heap). */
const HEAP_GROWING_PERCENT = 300;
const MAX_HEAP_GROWING_PERCENT = 1000;

/** The allocation-site flag applied (none when the environment keeps V8's default). */
export function tuneV8(env: Readonly<Record<string, string | undefined>>): string[] {
  return env['KVGATE_V8_PRETENURING'] === 'on' ? [] : applied(['--no-allocation-site-pretenuring']);
}

/**
 * The heap growing flag applied (none when `KVGATE_V8_HEAP_GROWING_PERCENT=0` keeps V8's own factor).
 * @throws Error when `KVGATE_V8_HEAP_GROWING_PERCENT` is not a whole number from 0 to 1,000 (and sets nothing).
 */
export function tuneHeapGrowth(env: Readonly<Record<string, string | undefined>>): string[] {
  const raw = env['KVGATE_V8_HEAP_GROWING_PERCENT'];
  if (raw === undefined || raw === '') return applied([`--heap-growing-percent=${HEAP_GROWING_PERCENT}`]);
  const percent = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || percent > MAX_HEAP_GROWING_PERCENT)
    throw new Error(
      `KVGATE_V8_HEAP_GROWING_PERCENT must be a whole number from 0 to ${MAX_HEAP_GROWING_PERCENT} ` +
        `(0 keeps V8's own growing factor), got ${JSON.stringify(raw)}`,
    );
  return percent === 0 ? [] : applied([`--heap-growing-percent=${percent}`]);
}

function applied(flags: string[]): string[] {
  for (const flag of flags) setFlagsFromString(flag);
  return flags;
}
