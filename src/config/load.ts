/**
 * Loading the gateway config: read the file (YAML, or JSON, which is parsed
 * strictly first), apply flag overrides, validate, and either return the
 * frozen `GatewayConfig` or throw one KVG_ERR_INVALID_CONFIG listing every
 * problem with its source (file:line:column or the flag), field path and
 * reason. kvgate refuses to start on any problem.
 */
import { readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { LineCounter, isMap, isScalar, parseDocument, type Document } from 'yaml';
import { KvgateError } from '../errors/index.js';
import type { ConfigOverride } from './flags.js';
import { formatPath, isPlainObject, type ConfigProblem, type FieldPath } from './reader.js';
import { resolveGatewayConfig } from './resolve.js';
import type { GatewayConfig } from './types.js';

export interface LoadOptions {
  /** Config file path (relative to cwd). Undefined: flags and defaults only. */
  file?: string | undefined;
  overrides?: readonly ConfigOverride[];
  /** Merged under the file's top-level keys that the file does not set (the embedded demo's models). */
  base?: Readonly<Record<string, unknown>> | undefined;
  env?: Readonly<Record<string, string | undefined>>;
  /** What follows from a problem, ending the error's first line (default: kvgate will not start). */
  consequence?: string | undefined;
  /** Told, once the config is valid, each field a flag set and the file's own value there (which the flag hides). */
  onFlagged?: ((fields: readonly FlaggedField[]) => void) | undefined;
}

/** A field a flag set, and the file's value at it (undefined: the file does not set it). */
export interface FlaggedField {
  /** As a problem names it, e.g. `models[0].router.router_temperature`. */
  readonly path: string;
  readonly flag: string;
  readonly fileValue: unknown;
}

export interface ParsedFile {
  data: unknown;
  doc: Document | undefined;
  lines: LineCounter;
}

/** The yaml library's message without its own "at line L, column C:" (the problem's position says where). */
function yamlReason(message: string): string {
  return message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
}

/** One KVG_ERR_INVALID_CONFIG listing every problem (`detail.problems`), each with its source and field path. */
export function configProblemsError(
  problems: readonly ConfigProblem[],
  consequence = 'kvgate will not start',
): KvgateError {
  const lines = problems.map(
    (p) => `  ${p.source}${p.position !== undefined ? `:${p.position}` : ''}: ${p.path}: ${p.reason}`,
  );
  const n = problems.length;
  return new KvgateError(
    'KVG_ERR_INVALID_CONFIG',
    `invalid configuration (${n} problem${n === 1 ? '' : 's'}); ${consequence}:\n${lines.join('\n')}`,
    { problems: problems.map((p) => ({ ...p })) },
  );
}

export function readConfigFile(path: string, consequence: string | undefined): ParsedFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'file not found'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'is a directory'
            : (err as Error).message;
    throw configProblemsError([{ source: path, path: '(file)', reason: `cannot read config: ${why}` }], consequence);
  }
  const lines = new LineCounter();
  if (path.endsWith('.json')) {
    try {
      JSON.parse(text);
    } catch (err) {
      throw configProblemsError(
        [{ source: path, path: '(file)', reason: `not valid JSON: ${(err as Error).message}` }],
        consequence,
      );
    }
  }
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length > 0) {
    throw configProblemsError(
      doc.errors.map((e) => {
        // An error found at the end of the input (an unclosed `{`, a missing value) is reported on the last line
        // that holds something, not on the empty line after the final newline.
        const last = Math.max(0, text.trimEnd().length - 1);
        const atEnd = e.pos[0] > last;
        const at = lines.linePos(atEnd ? last : e.pos[0]);
        return {
          source: path,
          path: '(file)',
          reason: `not valid YAML: ${yamlReason(e.message)}${atEnd ? ' (at the end of the file)' : ''}`,
          position: `${at.line}:${at.col}`,
        };
      }),
      consequence,
    );
  }
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw configProblemsError(
      [{ source: path, path: '(file)', reason: `not valid YAML: ${(err as Error).message}` }],
      consequence,
    );
  }
  return { data: data ?? {}, doc, lines };
}

export function positionOf(parsed: ParsedFile | undefined, path: FieldPath): string | undefined {
  if (parsed?.doc === undefined) return undefined;
  // The deepest existing field on the path (a missing field points at its parent);
  // a mapping entry points at its key, where the operator reads the field's name.
  for (let n = path.length; n >= 0; n--) {
    let node: unknown = n === 0 ? parsed.doc.contents : parsed.doc.getIn(path.slice(0, n), true);
    const last = path[n - 1];
    if (n > 0 && typeof last === 'string') {
      const parent = n === 1 ? parsed.doc.contents : parsed.doc.getIn(path.slice(0, n - 1), true);
      if (isMap(parent)) {
        const pair = parent.items.find((it) => isScalar(it.key) && it.key.value === last);
        if (pair !== undefined) node = pair.key;
      }
    }
    const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
    if (range !== undefined) {
      const at = parsed.lines.linePos(range[0]);
      return `${at.line}:${at.col}`;
    }
  }
  return undefined;
}

function setIn(
  target: Record<string, unknown>,
  path: readonly (string | number)[],
  value: unknown,
  onlyIfPresent: boolean,
): boolean {
  let node: unknown = target;
  for (let i = 0; i < path.length - 1; i++) {
    const key = path[i]!;
    const container = node as Record<string | number, unknown>;
    let next = container[key];
    if (next === undefined || next === null || typeof next !== 'object') {
      if (onlyIfPresent) return false;
      next = typeof path[i + 1] === 'number' ? [] : {};
      container[key] = next;
    }
    node = next;
  }
  const last = path[path.length - 1]!;
  if (onlyIfPresent && (node as Record<string | number, unknown>)[last] === undefined) return false;
  (node as Record<string | number, unknown>)[last] = value;
  return true;
}

/** Expands `models[*]` to every model the document has; returns the concrete paths that were set. */
function applyOverride(doc: Record<string, unknown>, o: ConfigOverride): FieldPath[] {
  const star = o.path.indexOf('*');
  if (star < 0) return setIn(doc, o.path, structuredClone(o.value), o.onlyIfPresent === true) ? [o.path] : [];
  const list = o.path
    .slice(0, star)
    .reduce<unknown>((n, k) => (n as Record<string | number, unknown> | undefined)?.[k], doc);
  if (!Array.isArray(list)) return [];
  const set: FieldPath[] = [];
  list.forEach((_, i) => {
    const path = [...o.path.slice(0, star), i, ...o.path.slice(star + 1)];
    if (setIn(doc, path, structuredClone(o.value), o.onlyIfPresent === true)) set.push(path);
  });
  return set;
}

function startsWith(path: FieldPath, prefix: FieldPath): boolean {
  return prefix.length <= path.length && prefix.every((k, i) => path[i] === k);
}

/**
 * Loads, merges and validates the gateway config.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG listing every problem (`detail.problems`).
 */
export function loadGatewayConfig(opts: LoadOptions = {}): GatewayConfig {
  const file = opts.file !== undefined ? resolvePath(opts.file) : undefined;
  const parsed = file !== undefined ? readConfigFile(file, opts.consequence) : undefined;
  const doc: Record<string, unknown> = isPlainObject(parsed?.data) ? structuredClone(parsed.data) : {};
  const problems: ConfigProblem[] = [];
  if (parsed !== undefined && !isPlainObject(parsed.data)) {
    problems.push({
      source: file!,
      path: '(root)',
      reason: 'must be a mapping of sections (listen, models, ...)',
      position: positionOf(parsed, []),
    });
  }
  const fromBase = new Set<string>();
  for (const [key, value] of Object.entries(opts.base ?? {})) {
    if (doc[key] === undefined) {
      doc[key] = structuredClone(value);
      fromBase.add(key);
    }
  }
  const flagged: { path: FieldPath; flag: string }[] = [];
  for (const o of opts.overrides ?? []) {
    if (
      o.path[0] === 'models' &&
      o.path.length === 1 &&
      Array.isArray(doc.models) &&
      doc.models.length > 0 &&
      !fromBase.has('models')
    ) {
      problems.push({
        source: o.flag,
        path: 'models',
        reason: `--model/--worker define the only model; the config file ${file ?? ''} already lists models`,
      });
      continue;
    }
    for (const path of applyOverride(doc, o)) flagged.push({ path, flag: o.flag });
  }
  const sourceOf = (path: FieldPath): { source: string; position?: string | undefined } => {
    let best: { path: FieldPath; flag: string } | undefined;
    for (const f of flagged)
      if (startsWith(path, f.path) && (best === undefined || f.path.length >= best.path.length)) best = f;
    if (best !== undefined) return { source: best.flag };
    if (typeof path[0] === 'string' && fromBase.has(path[0])) return { source: 'embedded demo' };
    if (file !== undefined) return { source: file, position: positionOf(parsed, path) };
    return { source: 'flags' };
  };
  const result = resolveGatewayConfig(doc, { file, sourceOf, env: opts.env ?? process.env });
  // A global router knob merged into several models may fail the same way in each: report it once.
  const seen = new Set<string>();
  for (const p of result.problems) {
    const key = `${p.source}\u0000${p.path}\u0000${p.reason}`;
    if (!seen.has(key)) problems.push(p);
    seen.add(key);
  }
  if (problems.length > 0) throw configProblemsError(problems, opts.consequence);
  opts.onFlagged?.(
    flagged.map((f) => ({
      path: formatPath(f.path),
      flag: f.flag,
      fileValue: f.path.reduce<unknown>(
        (n, k) => (n as Record<string | number, unknown> | undefined)?.[k],
        parsed?.data,
      ),
    })),
  );
  return result.config;
}
