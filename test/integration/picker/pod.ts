/** What the picker suites share: a `kvgate mocker` engine standing for one pod of an InferencePool. */
import { startCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';

/** One `kvgate mocker` engine on `host:port` (0: OS-chosen), its KV events on an OS-chosen port, as one pod. */
export async function startPod(host: string, port: number): Promise<{ proc: CliProcess; engine: MockerLine }> {
  const proc = startCli([
    'mocker',
    '--host',
    host,
    '--port',
    String(port),
    '--kv-events-port',
    '0',
    '--speedup',
    '1000',
    '--tokenizer',
    'demo',
  ]);
  const line = await proc.waitFor(/^\{"index".*$/m, `the mocker on ${host}`);
  return { proc, engine: JSON.parse(line[0]) as MockerLine };
}
