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
 * Library users run their own process: kvgate never changes V8's flags for
 * them (they can pass `--no-allocation-site-pretenuring` to node).
 */
import { setFlagsFromString } from 'node:v8';

/** The V8 flags applied (none when the environment keeps V8's defaults). */
export function tuneV8(env: Readonly<Record<string, string | undefined>>): string[] {
  if (env['KVGATE_V8_PRETENURING'] === 'on') return [];
  const flags = ['--no-allocation-site-pretenuring'];
  for (const flag of flags) setFlagsFromString(flag);
  return flags;
}
