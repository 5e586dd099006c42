/**
 * `kvgate picker -c FILE`: kvgate as a Gateway API Inference Extension
 * endpoint picker (src/picker). The config is the gateway's: one model with
 * an `inference_pool` section, `listen` as the gRPC address (ext_proc and
 * health), `admin.enabled` for `/metrics`. Runs until SIGTERM/SIGINT.
 */
import { pino, type Logger } from 'pino';
import { loadGatewayConfig, parseServeFlags } from '../config/index.js';
import { isKvgateError } from '../errors/index.js';
import { startPicker } from '../picker/index.js';

const USAGE =
  'usage: kvgate picker -c FILE [--set PATH=VALUE ...]\n\n' +
  'Serves Envoy ext_proc (the Gateway API Inference Extension endpoint-picker protocol) and gRPC health on the\n' +
  "config's listen address, for the one model with an inference_pool section. See the README's Kubernetes section.\n";

export async function pickerCommand(argv: string[]): Promise<number> {
  let running: Awaited<ReturnType<typeof startPicker>> | undefined;
  let logger: Logger | undefined;
  try {
    const flags = parseServeFlags(argv);
    if (flags.help) {
      process.stdout.write(USAGE);
      return 0;
    }
    const config = loadGatewayConfig({ file: flags.configFile, overrides: flags.overrides, env: process.env });
    logger = pino({ level: config.logLevel, base: { svc: 'kvgate', role: 'picker' } });
    running = await startPicker(config, logger);
    logger.info({ grpc: running.address, metrics: running.metricsUrl }, 'kvgate picker listening');
  } catch (err) {
    process.stderr.write(
      `kvgate picker: ${isKvgateError(err) ? err.message : ((err as Error).stack ?? String(err))}\n`,
    );
    return isKvgateError(err, 'KVG_ERR_INVALID_CONFIG') ? 2 : 1;
  }
  const r = running;
  await new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      logger?.info({ signal }, 'kvgate picker stopping');
      process.once(signal, () => process.exit(130));
      void r.stop().then(resolve, resolve);
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  });
  return 0;
}
