/**
 * The `kvgate` command. Each subcommand lives in its own module, loaded on
 * demand so `kvgate --help` starts fast, and exports `run(argv): Promise<number>`.
 */
export interface Subcommand {
  summary: string;
  load(): Promise<{ run(argv: string[]): Promise<number> }>;
}

export const SUBCOMMANDS: Record<string, Subcommand> = {
  version: { summary: 'print the kvgate version', load: () => import('./version.js') },
  serve: { summary: 'run the gateway (OpenAI API, KV-aware routing); no config = embedded demo', load: () => import('./serve.js') },
  mocker: { summary: 'start simulated vLLM/SGLang engines', load: () => import('./mocker.js') },
  replay: { summary: 'replay a request trace and compare routing policies', load: () => import('./replay.js') },
};

export function usage(): string {
  const lines = Object.entries(SUBCOMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return `usage: kvgate <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nRun \`kvgate <command> --help\` for a command's options.\n`;
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  const cmd = SUBCOMMANDS[name];
  if (cmd === undefined) {
    process.stderr.write(`kvgate: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  return (await cmd.load()).run(rest);
}
