/** What the picker suites share: a `kvgate mocker` engine standing for one pod of an InferencePool. */
import { startCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';

/**
 * One `kvgate mocker` engine on `host:port` (0: OS-chosen), its KV events on `kvPort` (0: OS-chosen; with `dpSize`
 * ranks, rank r's on `kvPort` + r), as one pod.
 */
export async function startPod(
  host: string,
  port: number,
  kvPort = 0,
  dpSize = 1,
): Promise<{ proc: CliProcess; engine: MockerLine }> {
  const proc = startCli([
    'mocker',
    '--host',
    host,
    '--port',
    String(port),
    '--kv-events-port',
    String(kvPort),
    '--dp-size',
    String(dpSize),
    '--speedup',
    '1000',
    '--tokenizer',
    'demo',
  ]);
  const line = await proc.waitFor(/^\{"index".*$/m, `the mocker on ${host}`);
  return { proc, engine: JSON.parse(line[0]) as MockerLine };
}
