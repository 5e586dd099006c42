/**
 * kvgate's container image (deploy/Dockerfile) built and run with buildah where no container registry is
 * reachable: the base image is assembled from Debian packages with mmdebstrap and this machine's Node binary
 * (deploy/base-image.sh), kept in buildah's storage under a name keyed by the Node version so later runs reuse
 * it; the image packs this checkout's build (KVGATE_BUILD=prebuilt); containers run with chroot isolation
 * (`podman run` cannot set rlimits in this sandbox), which shares the host's network and process namespaces.
 * Names are unique per process, so the test may run beside others.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT, startCommand, type Proc } from './process.js';

const exec = promisify(execFile);

/** Why the image cannot be built here (its tools are missing), or undefined when it can. */
export function imageToolsMissing(): string | undefined {
  const onPath = (cmd: string): boolean =>
    (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, cmd)));
  const missing = ['buildah', 'mmdebstrap', 'flock'].filter((cmd) => !onPath(cmd));
  if (missing.length === 0) return undefined;
  return `${missing.join(', ')} not installed (apt-get install -y buildah mmdebstrap util-linux; .ci/run does)`;
}

/** Runs `cmd args` to its end; rejects with its stderr when it fails. */
async function run(cmd: string, args: readonly string[], timeoutMs: number): Promise<string> {
  const { stdout } = await exec(cmd, args, { cwd: ROOT, timeout: timeoutMs, maxBuffer: 64 << 20 });
  return stdout;
}

const imageExists = (ref: string): Promise<boolean> =>
  buildah(['inspect', '--type', 'image', ref]).then(
    () => true,
    () => false,
  );

export const buildah = (args: readonly string[], timeoutMs = 120_000): Promise<string> =>
  run('buildah', args, timeoutMs);

/**
 * The base image, `localhost/kvgate-node20-base:<node version>`, assembled from this machine's Node binary
 * (`process.execPath`) unless buildah already holds it; a file lock keeps two runs from assembling it at once.
 * `built` says whether this call assembled it (minutes: mmdebstrap downloads and installs the packages).
 */
export async function ensureBaseImage(): Promise<{ image: string; built: boolean }> {
  const image = `localhost/kvgate-node20-base:${process.version}`;
  const lock = join(tmpdir(), `kvgate-node20-base-${process.version}.lock`);
  const script = 'if buildah inspect --type image "$1" >/dev/null 2>&1; then echo cached; else "$2" "$3" "$1"; fi';
  const out = await run(
    'flock',
    [lock, 'sh', '-c', script, 'sh', image, join(ROOT, 'deploy/base-image.sh'), process.execPath],
    900_000,
  );
  return { image, built: out.trim() !== 'cached' };
}

/** An image built by `buildImage`: its tag, its size as buildah states it, its config, and `remove()`. */
export interface BuiltImage {
  readonly tag: string;
  readonly size: string;
  /** The OCI config (User, Entrypoint, Cmd, WorkingDir, ...) and the Docker-format Healthcheck. */
  readonly config: Record<string, unknown>;
  readonly healthcheck: { Test?: string[] } | undefined;
  remove(): Promise<void>;
}

/**
 * Builds deploy/Dockerfile on `base` from this checkout's build (`npm run build` first): the context is staged
 * in a temporary folder by deploy/prebuilt-context.sh, so the build needs no registry. Docker format, so the
 * HEALTHCHECK is kept (the OCI format has no field for it).
 */
export async function buildImage(base: string): Promise<BuiltImage> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-image-'));
  const tag = `localhost/kvgate-image-test-${process.pid}-${basename(dir).slice(-6).toLowerCase()}`;
  try {
    const ctx = join(dir, 'ctx');
    await run(join(ROOT, 'deploy/prebuilt-context.sh'), [ctx], 300_000);
    const log = await buildah(
      ['bud', '--isolation', 'chroot', '--format', 'docker', '-f', join(ROOT, 'deploy/Dockerfile')].concat([
        '--build-arg',
        `NODE_IMAGE=${base}`,
        '--build-arg',
        'KVGATE_BUILD=prebuilt',
        '-t',
        tag,
        ctx,
      ]),
      600_000,
    );
    // Each stage's commit is a `--> <id>` line; the last is the image.
    const stages = [...log.matchAll(/^--> ([0-9a-f]{6,})$/gm)].map((m) => m[1]!).slice(0, -1);
    const inspected = JSON.parse(await buildah(['inspect', '--type', 'image', tag])) as {
      OCIv1: { config: Record<string, unknown> };
      Docker: { config: { Healthcheck?: { Test?: string[] } } };
    };
    const size = (await buildah(['images', '--format', '{{.Size}}', tag])).trim();
    return {
      tag,
      size,
      config: inspected.OCIv1.config,
      healthcheck: inspected.Docker.config.Healthcheck,
      async remove() {
        await buildah(['rmi', tag]);
        // buildah removes them itself once the build is committed; one left behind is removed here.
        for (const id of stages) if (await imageExists(id)) await buildah(['rmi', id]);
      },
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A working container of `image`, uniquely named; `remove()` deletes it. */
export async function containerOf(image: string): Promise<{ name: string; remove(): Promise<void> }> {
  const name = (await buildah(['from', '--name', `kvgate-image-test-${process.pid}`, image])).trim();
  return { name, remove: async () => void (await buildah(['rm', name])) };
}

/** `argv` run in `container` as its image's user and working directory; stop it as any Proc (SIGTERM). */
export function runInContainer(container: string, argv: readonly string[]): Proc {
  return startCommand('buildah', ['run', '--isolation', 'chroot', container, '--', ...argv]);
}

/** The process descending from `ancestor` whose command line is `argv0 ...rest` (Linux /proc), or undefined. */
export function descendantRunning(ancestor: number, argv0: string): number | undefined {
  const parentOf = new Map<number, number>();
  for (const name of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parentOf.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // exited while listed
    }
  }
  const descends = (pid: number): boolean => {
    for (let p = parentOf.get(pid); p !== undefined && p > 1; p = parentOf.get(p)) if (p === ancestor) return true;
    return false;
  };
  return [...parentOf.keys()].find((pid) => {
    if (!descends(pid)) return false;
    try {
      return basename(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0]!) === argv0;
    } catch {
      return false;
    }
  });
}

/** A process's real, effective, saved and filesystem user ids, then group ids (/proc/PID/status). */
export function idsOf(pid: number): { uid: number[]; gid: number[] } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const ids = (key: string): number[] =>
    status
      .match(new RegExp(`^${key}:\\s+(.*)$`, 'm'))![1]!
      .trim()
      .split(/\s+/)
      .map(Number);
  return { uid: ids('Uid'), gid: ids('Gid') };
}
