/**
 * The container image: deploy/Dockerfile built with buildah and run, serving the demo as uid 1000.
 *
 * No container registry is reachable here, so node:20-bookworm-slim cannot be pulled: the base is assembled
 * from Debian bookworm packages with mmdebstrap plus this machine's Node binary (`process.execPath`) and its
 * npm (deploy/base-image.sh), and given to the Dockerfile as NODE_IMAGE; it is kept in buildah's storage as
 * `localhost/kvgate-node20-base:<node version>`, so only the first run pays for it (minutes). The image packs
 * this checkout's build (`npm run build` first) with its production dependencies (KVGATE_BUILD=prebuilt, staged
 * by deploy/prebuilt-context.sh); the registry-backed source build (`npm ci` in the image) is not run here.
 * Containers run with buildah's chroot isolation (`podman run` cannot set rlimits in this sandbox): it shares
 * the host's network, so the gateway listens on an OS-chosen port instead of the default 8080, and the host's
 * process table, where the served process's ids are read. Skipped, saying why, where buildah or mmdebstrap is
 * missing; .ci/run installs them.
 */
import { copyFileSync, mkdtempSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildImage,
  buildah,
  containerOf,
  descendantRunning,
  ensureBaseImage,
  idsOf,
  imageToolsMissing,
  runInContainer,
  type BuiltImage,
} from '../helpers/container-image.js';
import { ROOT, assertBuilt, lineOf, stop, type Proc } from '../helpers/process.js';
import { until } from '../helpers/until.js';

const missing = imageToolsMissing();
if (missing !== undefined) console.warn(`skipping the container image test: ${missing}`);

describe.skipIf(missing !== undefined)('the container image (buildah, a base assembled from Debian packages)', () => {
  let image: BuiltImage | undefined;
  let container: { name: string; remove(): Promise<void> } | undefined;
  let served: Proc | undefined;
  let base = '';

  beforeAll(async () => {
    assertBuilt();
    const started = performance.now();
    const assembled = await ensureBaseImage();
    base = assembled.image;
    const baseDone = performance.now();
    image = await buildImage(base);
    container = await containerOf(image.tag);
    const seconds = (from: number, to: number): string => ((to - from) / 1000).toFixed(1);
    console.info(
      `image ${image.size} on ${base} (${assembled.built ? `assembled in ${seconds(started, baseDone)} s` : 'cached'});` +
        ` staged and built in ${seconds(baseDone, performance.now())} s`,
    );
  }, 900_000);

  afterAll(async () => {
    await stop(served);
    await container?.remove();
    await image?.remove();
  }, 120_000);

  it('refuses a KVGATE_BUILD other than source or prebuilt, naming it', async () => {
    const ctx = mkdtempSync(join(tmpdir(), 'kvgate-image-bad-'));
    try {
      for (const file of ['package.json', 'package-lock.json']) copyFileSync(join(ROOT, file), join(ctx, file));
      const args = ['bud', '--isolation', 'chroot', '-f', join(ROOT, 'deploy/Dockerfile')];
      const failed = await buildah([
        ...args,
        '--build-arg',
        `NODE_IMAGE=${base}`,
        '--build-arg',
        'KVGATE_BUILD=bogus',
        ctx,
      ]).then(
        () => 'built',
        (err: { stdout: string; stderr: string }) => err.stdout + err.stderr,
      );
      expect(failed).toContain("KVGATE_BUILD must be source or prebuilt, not 'bogus'");
    } finally {
      rmSync(ctx, { recursive: true, force: true });
    }
  }, 120_000);

  it('runs as uid 1000, the demo as its default command, with a health check and production dependencies only', async () => {
    expect(image!.config).toMatchObject({
      User: '1000:1000',
      WorkingDir: '/opt/kvgate',
      Entrypoint: ['node', 'bin/kvgate.js'],
      Cmd: ['serve', '--host', '0.0.0.0', '--port', '8080'],
    });
    expect(image!.healthcheck?.Test?.join(' ')).toContain('http://127.0.0.1:8080/health');
    const probe = [
      "const fs = require('node:fs');",
      'const writable = (p) => { try { fs.accessSync(p, fs.constants.W_OK); return true; } catch { return false; } };',
      'console.log(JSON.stringify({ uid: process.getuid(), gid: process.getgid(), cwd: process.cwd(),',
      "  pino: fs.existsSync('node_modules/pino'), typescript: fs.existsSync('node_modules/typescript'),",
      "  vitest: fs.existsSync('node_modules/vitest'), writable: writable('.') || writable('dist') }));",
    ].join('\n');
    const out = await buildah(['run', '--isolation', 'chroot', container!.name, '--', 'node', '-e', probe]);
    expect(JSON.parse(out)).toEqual({
      uid: 1000,
      gid: 1000,
      cwd: '/opt/kvgate',
      pino: true,
      typescript: false,
      vitest: false,
      writable: false,
    });
  }, 120_000);

  it('serves /v1/models and a chat request from its default command, as uid 1000 inside the container', async () => {
    const { Entrypoint, Cmd } = image!.config as { Entrypoint: string[]; Cmd: string[] };
    // The default command with the host's network in mind: loopback and a port the OS chooses.
    const cmd = Cmd.map((arg, i) => (Cmd[i - 1] === '--host' ? '127.0.0.1' : Cmd[i - 1] === '--port' ? '0' : arg));
    served = runInContainer(container!.name, [...Entrypoint, ...cmd]);
    const startLine = await lineOf(
      served,
      "the gateway's startup line",
      (o) => o.msg === 'kvgate gateway started',
      60_000,
    );
    const url = String(startLine.listen);
    await until(async () => (await fetch(`${url}/ready`).catch(() => undefined))?.status === 200, '/ready', 60_000);

    const node = descendantRunning(served.child.pid!, 'node');
    expect(node).toBeDefined();
    expect(idsOf(node!)).toEqual({ uid: [1000, 1000, 1000, 1000], gid: [1000, 1000, 1000, 1000] });
    // It runs in the image's file system, not the host's.
    const root = readlinkSync(`/proc/${node}/root`);
    expect(root).not.toBe('/');
    expect(readlinkSync(`/proc/${node}/cwd`)).toBe(`${root}/opt/kvgate`);

    const models = await fetch(`${url}/v1/models`);
    expect(models.status).toBe(200);
    const listed = (await models.json()) as { object: string; data: { id: string }[] };
    expect(listed.object).toBe('list');
    expect(listed.data.map((m) => m.id)).toEqual(['qwen3-demo']);

    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'qwen3-demo',
        messages: [{ role: 'user', content: 'What does a KV-cache-aware router do?' }],
        max_tokens: 8,
      }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get('x-kvgate-worker')).toMatch(/^[1-4]$/);
    const body = (await chat.json()) as {
      object: string;
      choices: { message: { role: string; content: string } }[];
      usage: { completion_tokens: number };
    };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]!.message.role).toBe('assistant');
    expect(body.choices[0]!.message.content.length).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBe(8);
  }, 180_000);
});
