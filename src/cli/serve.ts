/**
 * `kvgate serve`: the gateway. Reads the config file and flags (src/config),
 * starts the preprocessing pool, one router per model and the HTTP server
 * (src/frontend), and runs until SIGTERM or SIGINT, then drains.
 *
 * With no model configured it serves the embedded demo first started
 * (demo.ts), and prints a curl command to try.
 */
import { pino, type Logger } from 'pino';
import { traceLogFields } from '../common/index.js';
import {
  loadGatewayConfig,
  parseServeFlags,
  serveUsage,
  withoutCredentials,
  type FlaggedField,
  type GatewayConfig,
} from '../config/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import { Fleet, type FleetStatus } from '../fleet/index.js';
import { startGateway, type Gateway, type RouterPortFactory } from '../frontend/index.js';
import type { MockerHandle } from '../mocker/index.js';
import { adminReload } from './cluster-reload.js';
import { banner, resolveServeConfig } from './demo.js';
import { clusterMember, clusterMetricsText, leaveCluster, runClusterPrimary, type ClusterMember } from './cluster.js';
import { writePidFile } from './pid-file.js';
import { ConfigReloader, type ReloadOutcome, type ReloadTrigger } from './reload.js';
import { startTracing } from './tracing.js';

/**
 * What builds the routers of a config, and what it must release at shutdown: the `Fleet` (src/fleet), or a
 * test's own. `live` is the fleet's runtime side (membership, router knobs, discovered workers), when it has one.
 */
export interface RouterFleet {
  createRouter: RouterPortFactory;
  /** Each worker's live status for `/admin/models`. */
  readonly status?: FleetStatus | undefined;
  close(): Promise<void>;
  readonly live?: Pick<Fleet, 'members' | 'reconfigureRouter' | 'served'> | undefined;
}

/** The gateway's fleet, as `serve` drives it. */
function gatewayFleet(config: GatewayConfig, cluster: ClusterMember | undefined): RouterFleet {
  const fleet = new Fleet(config, { cluster });
  return { createRouter: fleet.createRouter, status: fleet.status, close: () => fleet.close(), live: fleet };
}

export interface ServeOptions {
  /** Builds the routers of the resolved config (default: a `Fleet`). */
  routers?: (config: GatewayConfig) => RouterFleet;
  env?: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
  /**
   * Where human-readable text goes: `--help` (default: stdout) and the startup banner (default:
   * stderr, so stdout carries only the logger's JSON lines and a log shipper can parse all of it).
   */
  out?: { write(text: string): unknown };
}

export interface ServeHandle {
  readonly gateway: Gateway;
  /** The embedded demo's engines (empty when models are configured). */
  readonly mockers: readonly MockerHandle[];
  /** Re-reads the config file (SIGHUP, POST /admin/reload); undefined without one. See reload.ts. */
  readonly reload: ((trigger: ReloadTrigger) => Promise<ReloadOutcome>) | undefined;
  /** Drains the gateway, then stops the demo engines. Idempotent. */
  stop(): Promise<void>;
}

/**
 * Starts `kvgate serve` with `argv`; resolves once it serves. Undefined for `--help`.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG (every problem listed) and whatever startup fails on.
 */
export async function serve(argv: readonly string[], opts: ServeOptions = {}): Promise<ServeHandle | undefined> {
  const env = opts.env ?? process.env;
  const flags = parseServeFlags(argv);
  if (flags.help) {
    (opts.out ?? process.stdout).write(serveUsage());
    return undefined;
  }
  const read: FileRead = { file: flags.configFile, overrides: flags.overrides, env };
  let flagged: readonly FlaggedField[] = [];
  const load = (base?: Record<string, unknown>): GatewayConfig =>
    loadGatewayConfig({ ...read, base, onFlagged: (f) => (flagged = f) });
  const member = clusterMember(env);
  const { config, mockers, demo } = await resolveServeConfig(load);
  refusePickerModels(config);
  const { tracing, logger } = startLogging(config, env, opts.logger);
  let gateway: Gateway;
  const fleet = (opts.routers ?? ((c: GatewayConfig) => gatewayFleet(c, member)))(config);
  // Hot reconfiguration re-reads the config file (with the same flags); the demo and flags alone have none.
  let reloader: ConfigReloader | undefined;
  const reloadable = fleet.live !== undefined && flags.configFile !== undefined && !demo;
  const served = (c: GatewayConfig): GatewayConfig => fleet.live?.served(c) ?? c;
  try {
    gateway = await startGateway({
      config: served(config),
      createRouter: fleet.createRouter,
      logger,
      fleet: fleet.status,
      process: member?.index,
      clusterMetrics: member === undefined ? undefined : (registry) => clusterMetricsText(registry, logger),
      reload: reloadable
        ? adminReload(member, () => ({ reloader, metrics: gateway?.server.metrics }), logger)
        : undefined,
    });
  } catch (err) {
    await fleet.close().catch(() => undefined);
    await tracing?.shutdown(logger);
    await Promise.allSettled(mockers.map((m) => m.close()));
    throw err;
  }
  // Spans lost from here on are counted in the gateway's registry and logged once per episode.
  tracing?.reportLosses(logger, gateway.server.metrics.tracingSpansDropped);
  // The served config (pins, /admin views) follows the discovered workers as they come and go; those the sources
  // (started with the routers, after startGateway's config was computed) brought before the hook are taken now.
  const server = gateway.server;
  let base = config;
  fleet.live?.members.onChange(() => server.reconfigure(served(base)));
  if (fleet.live !== undefined) server.reconfigure(served(base));
  if (reloadable) {
    reloader = configReloader({ config, flagged, read, logger, fleet, server, served, rebase: (c) => (base = c) });
  }
  (opts.out ?? process.stderr).write(banner(served(config), gateway, demo));
  let stopping: Promise<void> | undefined;
  const r = reloader;
  return {
    gateway,
    mockers,
    reload: r === undefined ? undefined : (trigger) => r.reload(trigger),
    stop(): Promise<void> {
      stopping ??= (async () => {
        await gateway.close();
        await fleet.close();
        await Promise.allSettled(mockers.map((m) => m.close()));
        // Within the export timeout: a collector that is down or never answers costs that much of the stop.
        await tracing?.shutdown(logger);
      })();
      return stopping;
    },
  };
}

/**
 * Tracing, then the one logger of the process (unless the caller brings its own): the gateway,
 * every router and every KV-event stream write to it. Tracing starts first so the logger's lines
 * inside a traced request carry its trace id.
 */
function startLogging(
  config: GatewayConfig,
  env: NodeJS.ProcessEnv,
  given: Logger | undefined,
): { tracing: ReturnType<typeof startTracing>; logger: Logger } {
  const tracing = startTracing(config.tracing, env);
  const logger =
    given ??
    pino({
      level: config.logLevel,
      base: { svc: 'kvgate' },
      ...(tracing !== undefined ? { mixin: traceLogFields } : {}),
    });
  if (tracing !== undefined)
    logger.info(
      // The endpoint (from the config or OTEL_EXPORTER_OTLP_ENDPOINT) may carry a user and password.
      {
        endpoint: withoutCredentials(tracing.endpoint),
        sampleRatio: tracing.sampleRatio,
        exportTimeoutMs: tracing.exportTimeoutMs,
      },
      'tracing: spans are exported over OTLP/HTTP',
    );
  return { tracing, logger };
}

/** How `serve` reads its config: the file, the command's flags on top, the environment. */
type FileRead = Pick<NonNullable<Parameters<typeof loadGatewayConfig>[0]>, 'file' | 'overrides' | 'env'>;

/** Hot reconfiguration: the file re-read with the same flags (`flagged`: theirs at start); `rebase`: the served base. */
function configReloader(p: {
  config: GatewayConfig;
  flagged: readonly FlaggedField[];
  read: FileRead;
  logger: Logger;
  fleet: RouterFleet;
  server: Gateway['server'];
  served: (c: GatewayConfig) => GatewayConfig;
  rebase: (c: GatewayConfig) => GatewayConfig;
}): ConfigReloader {
  const { fleet, server } = p;
  return new ConfigReloader(p.config, {
    load: (onFlagged) =>
      loadGatewayConfig({ ...p.read, consequence: 'the running configuration is unchanged', onFlagged }),
    flaggedAtStart: p.flagged,
    members: fleet.live!.members,
    reconfigureRouter: (m) => fleet.live!.reconfigureRouter(m),
    logger: p.logger,
    metrics: server.metrics,
    // The base the served config follows moves only once the server took `c`: a refused `c` must not come back
    // with the next membership change.
    server: {
      reconfigure: (c) => {
        server.reconfigure(p.served(c));
        p.rebase(c);
      },
    },
  });
}

/** A model with an `inference_pool` is served by `kvgate picker`: the gateway would have none of its pods. */
function refusePickerModels(config: GatewayConfig): void {
  const pooled = config.models.find((m) => m.inferencePool !== undefined);
  if (pooled === undefined) return;
  throw new KvgateError(
    'KVG_ERR_INVALID_CONFIG',
    `model ${pooled.name}: inference_pool is read by kvgate picker; kvgate serve takes a Service's ready endpoints ` +
      'with a kubernetes section instead',
    { source: 'models', reason: 'inference_pool' },
  );
}

/**
 * One line for a startup failure: the message of a KvgateError; for an address in use, the address
 * and what to do; the stack only for the unexpected.
 */
function startupFailure(err: unknown): string {
  if (isKvgateError(err)) return err.message;
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number };
  if (e.code === 'EADDRINUSE' || e.code === 'EACCES') {
    const where =
      e.address === undefined
        ? 'the listen address'
        : `${e.address.includes(':') ? `[${e.address}]` : e.address}:${e.port ?? ''}`;
    const why =
      e.code === 'EADDRINUSE'
        ? 'the address is already in use (by another kvgate or another server)'
        : 'the port needs privileges kvgate does not have';
    return (
      `cannot listen on ${where}: ${why}; stop that process or choose another port with --port (--admin-port for the ` +
      `admin listener) or listen.port in the config (0 = any free port)`
    );
  }
  return (err as Error).stack ?? String(err);
}

/**
 * With `--processes N` (N > 1) in the process started by the operator: the cluster primary (cluster.ts),
 * forking N processes that each run `serve`; undefined otherwise (this process serves).
 */
function clusterProcesses(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): GatewayConfig | undefined {
  if (clusterMember(env) !== undefined) return undefined;
  const flags = parseServeFlags(argv);
  if (flags.help) return undefined;
  const config = loadGatewayConfig({ file: flags.configFile, overrides: flags.overrides, env });
  if (config.processes === 1) return undefined;
  if (config.models.length === 0) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      'processes: the embedded demo runs in one process; configure models (-c FILE or --model/--worker) to run several',
      { source: 'processes', reason: 'demo' },
    );
  }
  return config;
}

/** A SIGHUP received while the gateway was starting (the config may have changed after it was read). */
let earlyHangup = false;
const noteEarlyHangup = (): void => {
  earlyHangup = true;
};

/** How long a stopped gateway's process waits for handles it no longer uses before it exits anyway. */
const EXIT_AFTER_STOP_MS = 2000;

/** Runs until SIGTERM/SIGINT (a second signal exits at once). Resolves to the exit code. */
export async function serveCommand(argv: string[], opts: ServeOptions = {}): Promise<number> {
  let handle: ServeHandle | undefined;
  let removePidFile = (): void => undefined;
  try {
    const env = opts.env ?? process.env;
    const c = clusterProcesses(argv, env);
    if (c !== undefined) {
      const remove = writePidFile(c.pidFile);
      try {
        return await runClusterPrimary(
          c.processes,
          opts.logger ?? pino({ level: c.logLevel, base: { svc: 'kvgate', role: 'primary' } }),
        );
      } finally {
        remove();
      }
    }
    // SIGHUP's default action ends the process: one sent while the gateway starts is kept and served once it runs.
    process.on('SIGHUP', noteEarlyHangup);
    handle = await serve(argv, opts);
    // A cluster's processes leave the file to their primary.
    if (handle !== undefined && clusterMember(env) === undefined)
      removePidFile = writePidFile(handle.gateway.config.pidFile);
  } catch (err) {
    process.off('SIGHUP', noteEarlyHangup);
    await handle?.stop();
    process.stderr.write(`kvgate serve: ${startupFailure(err)}\n`);
    return isKvgateError(err, 'KVG_ERR_INVALID_CONFIG') ? 2 : 1;
  }
  if (handle === undefined) return 0;
  const h = handle;
  // SIGHUP reloads the config file; the outcome (applied, or rejected with every problem) is in the log.
  const onHangup = (): void => {
    // Rejected or failed, the reloader has logged and counted it.
    if (h.reload !== undefined) h.reload('sighup').catch(() => undefined);
    else h.gateway.logger.warn('SIGHUP: kvgate serve was started without a config file (-c FILE): nothing to reload');
  };
  process.on('SIGHUP', onHangup);
  process.off('SIGHUP', noteEarlyHangup);
  if (earlyHangup) {
    earlyHangup = false;
    onHangup();
  }
  await new Promise<void>((resolve) => {
    // One listener for the first signal and the second (which exits 130 at once), never removed: with none, a signal
    // meets the default action, and a second one sent as soon as the drain's log line is read could land between a
    // first listener's removal and its successor's (a process descheduled there on a loaded machine died by SIGINT).
    let draining = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (draining) process.exit(130);
      draining = true;
      process.off('SIGHUP', onHangup);
      h.gateway.logger.info(
        { signal, inflight: h.gateway.server.inflight },
        'shutting down: draining in-flight requests',
      );
      void h.stop().then(resolve, (err: unknown) => {
        h.gateway.logger.error({ err }, 'shutdown failed');
        resolve();
      });
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
  removePidFile();
  leaveCluster();
  // The last resort: a handle the shutdown did not close (every one it knows of, it closes) must not keep the
  // process alive. Firing is a defect to fix where the handle comes from: the warn line names what was left.
  setTimeout(() => {
    h.gateway.logger.warn(
      { resources: process.getActiveResourcesInfo(), waitedMs: EXIT_AFTER_STOP_MS },
      'shutdown: handles still open after the gateway stopped kept the process alive; exiting anyway',
    );
    process.exit();
  }, EXIT_AFTER_STOP_MS).unref();
  return 0;
}
