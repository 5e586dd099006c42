/**
 * The `kvgate` command. Each subcommand lives in its own module, loaded on
 * demand so `kvgate --help` starts fast, and exports its runner
 * (`serveCommand`, `mockerCommand`, ...: `(argv) => Promise<exit code>`).
 */
export interface Subcommand {
  summary: string;
  load(): Promise<{ run(argv: string[]): Promise<number> }>;
}

export const SUBCOMMANDS: Record<string, Subcommand> = {
  version: {
    summary: 'print the kvgate version',
    load: async () => ({ run: (await import('./version.js')).versionCommand }),
  },
  serve: {
    summary: 'run the gateway (OpenAI API, KV-aware routing); no config = embedded demo',
    load: async () => {
      const { serveCommand } = await import('./serve.js');
      return { run: (argv) => serveCommand(argv) };
    },
  },
  mocker: {
    summary: 'start simulated vLLM/SGLang engines',
    load: async () => ({ run: (await import('./mocker.js')).mockerCommand }),
  },
  picker: {
    summary: 'serve a Kubernetes InferencePool as a Gateway API Inference Extension endpoint picker (Envoy ext_proc)',
    load: async () => ({ run: (await import('./picker.js')).pickerCommand }),
  },
  register: {
    summary: 'register one engine in etcd for discovery and keep its lease alive',
    load: async () => ({ run: (await import('./register.js')).registerCommand }),
  },
  replay: {
    summary: 'replay a request trace and compare routing policies',
    load: async () => {
      const { replayCommand } = await import('./replay.js');
      const scenario = (argv: string[]): boolean => argv.some((a) => a === '--scenario' || a.startsWith('--scenario='));
      const disagg = async (argv: string[]) => (await import('./replay-disagg.js')).replayDisaggCommand(argv);
      return { run: (argv) => (scenario(argv) ? disagg(argv) : replayCommand(argv)) };
    },
  },
};

/** `kvgate --help`. */
export function cliUsage(): string {
  const lines = Object.entries(SUBCOMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return (
    `usage: kvgate <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nRun \`kvgate <command> --help\` for a ` +
    `command's options; \`kvgate --version\` prints the version.\n`
  );
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(cliUsage());
    return name === undefined ? 2 : 0;
  }
  // `--version` and `-v` are the conventional spellings of the `version` command.
  const cmd = SUBCOMMANDS[name === '--version' || name === '-v' ? 'version' : name];
  if (cmd === undefined) {
    // A typo gets the command it was probably meant to be (`kvgate serv` -> serve), as a mistyped flag does;
    // loaded here only, so `kvgate --help` stays fast.
    const { closestFlag } = await import('../config/index.js');
    const near = closestFlag(name, Object.keys(SUBCOMMANDS))?.replace(/^--/, '');
    const hint = near === undefined ? '' : `; did you mean '${near}'?`;
    process.stderr.write(`kvgate: unknown command '${name}'${hint}\n\n${cliUsage()}`);
    return 2;
  }
  return (await cmd.load()).run(rest);
}
