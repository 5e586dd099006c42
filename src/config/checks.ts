/**
 * Where a config document came from (error sources, relative paths), and
 * the value checks shared by every section's reader.
 */
import { dirname, isAbsolute, resolve as resolvePath } from 'node:path';
import type { FieldPath } from './reader.js';

/** Resolution context: where the document came from, for error sources and relative paths. */
export interface ResolveContext {
  /** Absolute path of the config file, if any (relative paths in it resolve against its folder). */
  file: string | undefined;
  /** Which input set a path: the flag name for overridden paths, else the file. */
  sourceOf(path: FieldPath): { source: string; position?: string | undefined };
  /** Environment for `auth.api_keys_env`. */
  env: Readonly<Record<string, string | undefined>>;
}

export function checkHttpUrl(s: string): string | undefined {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return 'must be an absolute http(s) URL';
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return 'must be an http:// or https:// URL';
  if (u.search !== '' || u.hash !== '') return 'must not have a query or fragment';
  if (u.username !== '' || u.password !== '') return 'must not embed credentials';
  return undefined;
}

/**
 * An engine's base URL: kvgate adds `/v1/chat/completions` and the other API paths itself, so a URL that
 * already ends in `/v1` would send every request to `/v1/v1/...` and fail 404 after passing health checks.
 */
export function checkEngineUrl(s: string): string | undefined {
  const bad = checkHttpUrl(s);
  if (bad !== undefined) return bad;
  const u = new URL(s);
  if (/\/v1\/?$/.test(u.pathname)) {
    const base = `${u.origin}${u.pathname.replace(/\/v1\/?$/, '')}`;
    return `must be the engine's base URL without /v1 (kvgate adds the API paths; requests would go to /v1/v1/...): ${base}`;
  }
  return undefined;
}

export function checkZmqEndpoint(s: string): string | undefined {
  const m = /^(tcp|ipc):\/\/(.+)$/.exec(s);
  if (m === null) return 'must be a ZMQ endpoint such as tcp://10.0.0.5:5557 (or ipc://path)';
  if (m[1] === 'tcp') {
    const hp = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(m[2]!);
    if (hp === null || Number(hp[2]) > 65535) return 'must be tcp://host:port';
    if (hp[1] === '*' || hp[1] === '0.0.0.0' || hp[1] === '[::]') {
      return "is a bind address (the engine's side); give the engine's host, which kvgate connects to";
    }
  }
  return undefined;
}

export function checkHost(s: string): string | undefined {
  return /^[A-Za-z0-9.:\-[\]]+$/.test(s) ? undefined : 'must be a host name or IP address';
}

function baseDir(ctx: ResolveContext): string {
  return ctx.file !== undefined ? dirname(ctx.file) : process.cwd();
}

/** `p` as an absolute path (relative paths resolve against the config file's folder). */
export function absolute(ctx: ResolveContext, p: string): string {
  return isAbsolute(p) ? p : resolvePath(baseDir(ctx), p);
}
