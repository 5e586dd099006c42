#!/usr/bin/env node
// The `kvgate` command: a thin launcher for the compiled CLI (npm run build).
// V8 is tuned first, before the CLI's modules load (src/cli/v8-tuning.ts says why).
import { tuneHeapGrowth, tuneV8 } from '../dist/src/cli/v8-tuning.js';

try {
  tuneHeapGrowth(process.env);
  tuneV8(process.env);
} catch (err) {
  process.stderr.write(`kvgate: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
const { main } = await import('../dist/src/cli/index.js');

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`kvgate: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
