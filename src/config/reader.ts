/**
 * A small typed reader over an untrusted parsed document (YAML or JSON). Each
 * accessor checks one field, records a problem (field path + reason) instead of
 * throwing, and returns a usable placeholder so one pass reports every problem
 * in the file at once. Unknown keys are problems too: a misspelt knob must not
 * be silently ignored.
 */

/** A path into the document: object keys and array indices. */
export type FieldPath = readonly (string | number)[];

export interface ConfigProblem {
  /** Dotted path with [index] for arrays, e.g. `models[0].workers[1].url`. */
  path: string;
  reason: string;
  /** Where the value came from: the config file, a flag (`--port`), or `defaults`. */
  source: string;
  /** 1-based line:column in the file, when known. */
  position?: string | undefined;
}

export function formatPath(path: FieldPath): string {
  let out = '';
  for (const p of path) {
    if (typeof p === 'number') out += `[${p}]`;
    else out += out === '' ? p : `.${p}`;
  }
  return out === '' ? '(root)' : out;
}

/** Short, safe rendering of a bad value for an error message. */
export function show(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'an object';
  return String(value);
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Levenshtein distance, for "did you mean" hints on unknown keys. */
function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j]!;
      prev[j] = Math.min(up + 1, prev[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length]!;
}

export function closestKey(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = editDistance(key.toLowerCase(), k.toLowerCase());
    if (d < bestD) {
      bestD = d;
      best = k;
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(key.length / 3)) ? best : undefined;
}

export interface IntRange {
  min?: number;
  max?: number;
}

/**
 * Reads fields of one object node. `problems` is shared by every reader of a
 * document; `sourceOf(path)` tells which input set a path (file or flag).
 */
export class ConfigReader {
  readonly path: FieldPath;
  readonly node: Record<string, unknown>;
  readonly #problems: ConfigProblem[];
  readonly #sourceOf: (path: FieldPath) => { source: string; position?: string | undefined };

  constructor(
    node: Record<string, unknown>,
    path: FieldPath,
    problems: ConfigProblem[],
    sourceOf: (path: FieldPath) => { source: string; position?: string | undefined },
  ) {
    this.node = node;
    this.path = path;
    this.#problems = problems;
    this.#sourceOf = sourceOf;
  }

  /** Records a problem at `path` (absolute). */
  problemAt(path: FieldPath, reason: string): void {
    const { source, position } = this.#sourceOf(path);
    this.#problems.push({ path: formatPath(path), reason, source, position });
  }

  problem(key: string, reason: string): void {
    this.problemAt([...this.path, key], reason);
  }

  has(key: string): boolean {
    return this.node[key] !== undefined;
  }

  /** Flags every key not in `known` (with the closest known key as a hint). */
  allowOnly(known: readonly string[]): void {
    for (const key of Object.keys(this.node)) {
      if (known.includes(key)) continue;
      const hint = closestKey(key, known);
      this.problem(
        key,
        `unknown field${hint !== undefined ? ` (did you mean "${hint}"?)` : ''}; expected one of: ${known.join(', ')}`,
      );
    }
  }

  /** A nested object reader, or undefined (with a problem) if the value is not an object. Absent: undefined, no problem. */
  child(key: string): ConfigReader | undefined {
    const v = this.node[key];
    if (v === undefined || v === null) return undefined;
    if (!isPlainObject(v)) {
      this.problem(key, `must be an object, got ${show(v)}`);
      return undefined;
    }
    return new ConfigReader(v, [...this.path, key], this.#problems, this.#sourceOf);
  }

  /** Reader for an element of a list (already checked to be an object by the caller). */
  at(path: FieldPath, node: Record<string, unknown>): ConfigReader {
    return new ConfigReader(node, path, this.#problems, this.#sourceOf);
  }

  list(key: string): unknown[] | undefined {
    const v = this.node[key];
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) {
      this.problem(key, `must be a list, got ${show(v)}`);
      return undefined;
    }
    return v;
  }

  str(key: string, fallback: string, check?: (s: string) => string | undefined): string {
    const v = this.node[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'string' || v.length === 0) {
      this.problem(key, `must be a non-empty string, got ${show(v)}`);
      return fallback;
    }
    const why = check?.(v);
    if (why !== undefined) {
      this.problem(key, `${why}, got ${show(v)}`);
      return fallback;
    }
    return v;
  }

  optStr(key: string, check?: (s: string) => string | undefined): string | undefined {
    if (this.node[key] === undefined || this.node[key] === null) return undefined;
    const s = this.str(key, '', check);
    return s === '' ? undefined : s;
  }

  /** A required string; records "is required" when absent. */
  reqStr(key: string, check?: (s: string) => string | undefined): string {
    if (this.node[key] === undefined || this.node[key] === null) {
      this.problem(key, 'is required');
      return '';
    }
    return this.str(key, '', check);
  }

  int(key: string, fallback: number, range: IntRange = {}): number {
    const v = this.node[key];
    if (v === undefined || v === null) return fallback;
    const lo = range.min ?? 0;
    const hi = range.max ?? Number.MAX_SAFE_INTEGER;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
      this.problem(key, `must be an integer in [${lo}, ${hi}], got ${show(v)}`);
      return fallback;
    }
    return v;
  }

  optInt(key: string, range: IntRange = {}): number | undefined {
    if (this.node[key] === undefined || this.node[key] === null) return undefined;
    const n = this.int(key, Number.NaN, range);
    return Number.isNaN(n) ? undefined : n;
  }

  reqInt(key: string, range: IntRange = {}): number {
    if (this.node[key] === undefined || this.node[key] === null) {
      this.problem(key, 'is required');
      return Number.NaN;
    }
    return this.int(key, Number.NaN, range);
  }

  num(key: string, fallback: number, range: { min?: number; max?: number; exclusiveMin?: boolean } = {}): number {
    const v = this.node[key];
    if (v === undefined || v === null) return fallback;
    const lo = range.min ?? -Infinity;
    const hi = range.max ?? Infinity;
    const okLo = range.exclusiveMin === true ? (v as number) > lo : (v as number) >= lo;
    if (typeof v !== 'number' || !Number.isFinite(v) || !okLo || v > hi) {
      this.problem(key, `must be a number in ${range.exclusiveMin === true ? '(' : '['}${lo}, ${hi}], got ${show(v)}`);
      return fallback;
    }
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.node[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'boolean') {
      this.problem(key, `must be true or false, got ${show(v)}`);
      return fallback;
    }
    return v;
  }

  oneOf<T extends string>(key: string, allowed: readonly T[], fallback: T): T {
    const v = this.node[key];
    if (v === undefined || v === null) return fallback;
    if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
      const hint = typeof v === 'string' ? closestKey(v, allowed) : undefined;
      this.problem(
        key,
        `must be one of ${allowed.join(', ')}; got ${show(v)}${hint !== undefined ? ` (did you mean "${hint}"?)` : ''}`,
      );
      return fallback;
    }
    return v as T;
  }
}
