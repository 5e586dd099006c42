#!/usr/bin/env node
// The `kvgate` command: a thin launcher for the compiled CLI (npm run build).
import { main } from '../dist/src/cli/index.js';

main(process.argv.slice(2)).then(
  (code) => { if (typeof code === 'number') process.exitCode = code; },
  (err) => {
    process.stderr.write(`kvgate: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
