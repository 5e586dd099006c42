/**
 * The shape rules a reader relies on, checked on the TypeScript syntax tree
 * of src/ and workers/ (assembly/ and the bench harness are outside them):
 *
 * - no file over 450 lines and no function over 80 lines, unless a `@long`
 *   tag in the file's (or the function's) leading comment says why (a table,
 *   a generated list); no line over 140 characters (the formatter wraps at
 *   120: a longer line is a string it cannot break, and is split by hand);
 * - no class members installed at run time with `Object.defineProperty` in
 *   src/routing (a router's members are written out, so a reader and the
 *   compiler see them; common's lazily parsed JSON objects define data
 *   properties, which is what the call is for);
 * - one name per concept: no exported name is declared in two files, and a
 *   string-literal union that names a concept (the worker role, the engine
 *   dialect, the router mode) is spelled out in one place only;
 * - each concept type of the request path has one shape, declared once
 *   (`CONCEPT_TYPES`): a type that carries a (worker, dp rank) pair extends
 *   `WorkerRank`, a prompt's block and sequence hashes are `PromptHashes`,
 *   what a dialect adds to a leg is `LegFields`; a function takes the pair as
 *   a `WorkerRank`, not as `(workerId, dpRank)` numbers, unless a
 *   `@rank-numbers` tag says why (the WASM boundary, a hot loop);
 * - one name per role: a field holding a logger is `logger`, and a
 *   constructor's input type ends in `Options` (`Filled<X>Options` once its
 *   defaults are filled), never `Init`, `Deps`, `Parts`, `Env` or `Resolved`.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const MAX_FILE_LINES = 450;
const MAX_FUNCTION_LINES = 80;
const MAX_LINE_CHARS = 140;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const sources = [...files(join(ROOT, 'src')), ...files(join(ROOT, 'workers'))].map((path) => {
  const text = readFileSync(path, 'utf8');
  return { rel: relative(ROOT, path), text, sf: ts.createSourceFile(path, text, ts.ScriptTarget.ES2022, true) };
});

/** The leading comments of a node (its JSDoc and line comments) carry a `@<tag>` with a reason. */
function hasTag(node: ts.Node, text: string, tag: string): boolean {
  const ranges = ts.getLeadingCommentRanges(text, node.getFullStart()) ?? [];
  return ranges.some((r) => new RegExp(`@${tag}\\s+\\S`).test(text.slice(r.pos, r.end)));
}

/** The leading comments of a node carry a `@long` reason. */
function hasLongTag(node: ts.Node, text: string): boolean {
  return hasTag(node, text, 'long');
}

function lineOf(sf: ts.SourceFile, pos: number): number {
  return sf.getLineAndCharacterOfPosition(pos).line + 1;
}

function isFunctionLike(node: ts.Node): node is ts.FunctionLikeDeclaration {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isArrowFunction(node) ||
    ts.isFunctionExpression(node) ||
    ts.isConstructorDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node)
  );
}

/** The node whose leading comment documents a function (its variable statement for `const f = () => ...`). */
function documented(node: ts.Node): ts.Node {
  let n: ts.Node = node;
  while (
    n.parent !== undefined &&
    (ts.isVariableDeclaration(n.parent) ||
      ts.isVariableDeclarationList(n.parent) ||
      ts.isVariableStatement(n.parent) ||
      ts.isPropertyAssignment(n.parent) ||
      ts.isPropertyDeclaration(n.parent))
  )
    n = n.parent;
  return n;
}

function functionName(node: ts.FunctionLikeDeclaration): string {
  if (node.name !== undefined) return node.name.getText();
  const d = documented(node);
  if (ts.isVariableStatement(d)) return d.declarationList.declarations[0]!.name.getText();
  if (ts.isPropertyAssignment(d) || ts.isPropertyDeclaration(d)) return d.name.getText();
  return ts.isConstructorDeclaration(node) ? 'constructor' : '(anonymous)';
}

/** String-literal unions that each name one concept, keyed by their sorted members. */
const CONCEPT_UNIONS: Record<string, string> = {
  'aggregated|decode|prefill': 'WorkerRole',
  'sglang|vllm': 'EngineDialect',
  'direct|kv|least-loaded|power-of-two|random|round-robin': 'RouterMode',
};

/**
 * The concept types: each is declared once, in the file named, and no other type spells out its members.
 * `members` are property names and the type text each must have for a declaration to restate the concept.
 */
const CONCEPT_TYPES: readonly { name: string; file: string; members: Record<string, readonly string[]> }[] = [
  { name: 'WorkerRank', file: 'src/common/vocabulary.ts', members: { workerId: ['number'], dpRank: ['number'] } },
  {
    name: 'PromptHashes',
    file: 'src/wasm/hashing.ts',
    members: { local: ['BigUint64Array'], seq: ['BigUint64Array'] },
  },
  {
    name: 'LegFields',
    file: 'src/engines/leg-fields.ts',
    members: {
      fields: ['Readonly<Record<string, unknown>>', 'Record<string, unknown>'],
      headers: ['Readonly<Record<string, string>>', 'Record<string, string>'],
    },
  },
];

/** Names of concepts renamed once; they must not come back. */
const RETIRED_NAMES: Record<string, string> = {
  EngineLeg: 'LegFields',
  blockHashes: 'PromptHashes (`hashes.local`), outside KV events',
  sequenceHashes: 'PromptHashes (`hashes.seq`)',
};

/** Suffixes (and a prefix) a constructor's input type does not take: it is `XOptions`, or `FilledXOptions` once filled. */
const INPUT_TYPE_NAME = /.(Init|Deps|Parts|Env)$|^Resolved[A-Z]/;

/** Interfaces and type literals with their property members' names and type texts. */
function typeShapes(): { at: string; name: string | undefined; members: Map<string, string> }[] {
  const out: { at: string; name: string | undefined; members: Map<string, string> }[] = [];
  for (const { rel, sf } of sources) {
    const visit = (node: ts.Node): void => {
      if (ts.isInterfaceDeclaration(node) || ts.isTypeLiteralNode(node)) {
        const members = new Map<string, string>();
        // An optional member is another concept (a pin names a worker and maybe a rank): marked, it restates nothing.
        for (const m of node.members) {
          if (!ts.isPropertySignature(m) || m.type === undefined) continue;
          members.set(m.name.getText(), `${m.questionToken !== undefined ? '?' : ''}${m.type.getText()}`);
        }
        const name = ts.isInterfaceDeclaration(node) ? node.name.text : undefined;
        out.push({ at: `${rel}:${lineOf(sf, node.getStart())}`, name, members });
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return out;
}

/** Every node of src/ and workers/ through `check`; returns what it reports, each prefixed with `file:line`. */
function scan(check: (node: ts.Node, text: string) => string | undefined): string[] {
  const out: string[] = [];
  for (const { rel, text, sf } of sources) {
    const visit = (node: ts.Node): void => {
      const found = check(node, text);
      if (found !== undefined) out.push(`${rel}:${lineOf(sf, node.getStart())} ${found}`);
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return out;
}

describe('shape', () => {
  it(`no file over ${MAX_FILE_LINES} lines without a @long reason`, () => {
    const long = sources
      .filter(
        ({ text, sf }) =>
          text.split('\n').length > MAX_FILE_LINES &&
          !(sf.statements[0] !== undefined && hasLongTag(sf.statements[0], text)),
      )
      .map(({ rel, text }) => `${rel}: ${text.split('\n').length} lines`);
    expect(long).toEqual([]);
  });

  it(`no line over ${MAX_LINE_CHARS} characters`, () => {
    const long = sources.flatMap(({ rel, text }) =>
      text
        .split('\n')
        .flatMap((line, i) => (line.length > MAX_LINE_CHARS ? [`${rel}:${i + 1}: ${line.length} characters`] : [])),
    );
    expect(long).toEqual([]);
  });

  it('no members installed with Object.defineProperty in src/routing', () => {
    const found = sources
      .filter(({ rel, text }) => rel.startsWith('src/routing/') && /Object\.defineProperty\(/.test(text))
      .map(({ rel }) => rel);
    expect(found).toEqual([]);
  });

  it(`no function over ${MAX_FUNCTION_LINES} lines without a @long reason`, () => {
    const long: string[] = [];
    for (const { rel, text, sf } of sources) {
      const visit = (node: ts.Node): void => {
        if (isFunctionLike(node) && node.body !== undefined) {
          const lines = lineOf(sf, node.getEnd()) - lineOf(sf, node.getStart()) + 1;
          if (lines > MAX_FUNCTION_LINES && !hasLongTag(documented(node), text))
            long.push(`${rel}:${lineOf(sf, node.getStart())} ${functionName(node)}: ${lines} lines`);
        }
        ts.forEachChild(node, visit);
      };
      visit(sf);
    }
    expect(long).toEqual([]);
  });

  it('no exported name is declared in two files', () => {
    const where = new Map<string, string[]>();
    for (const { rel, sf } of sources) {
      for (const st of sf.statements) {
        const exported =
          ts.canHaveModifiers(st) && (ts.getModifiers(st) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
        if (!exported) continue;
        const names = ts.isVariableStatement(st)
          ? st.declarationList.declarations.map((d) => d.name.getText())
          : (ts.isInterfaceDeclaration(st) ||
                ts.isTypeAliasDeclaration(st) ||
                ts.isClassDeclaration(st) ||
                ts.isFunctionDeclaration(st) ||
                ts.isEnumDeclaration(st)) &&
              st.name !== undefined
            ? [st.name.text]
            : [];
        for (const n of names) where.set(n, [...(where.get(n) ?? []), rel]);
      }
    }
    const twice = [...where].filter(([, at]) => new Set(at).size > 1).map(([n, at]) => `${n}: ${at.join(', ')}`);
    expect(twice).toEqual([]);
  });

  it('each concept union is spelled out once', () => {
    const seen = new Map<string, string[]>();
    for (const { rel, sf } of sources) {
      const visit = (node: ts.Node): void => {
        if (
          ts.isUnionTypeNode(node) &&
          node.types.every((t) => ts.isLiteralTypeNode(t) && ts.isStringLiteral(t.literal))
        ) {
          const key = node.types
            .map((t) => ((t as ts.LiteralTypeNode).literal as ts.StringLiteral).text)
            .sort()
            .join('|');
          const concept = CONCEPT_UNIONS[key];
          if (concept !== undefined)
            seen.set(concept, [...(seen.get(concept) ?? []), `${rel}:${lineOf(sf, node.getStart())}`]);
        }
        ts.forEachChild(node, visit);
      };
      visit(sf);
    }
    const repeated = [...seen].filter(([, at]) => at.length > 1).map(([c, at]) => `${c}: ${at.join(', ')}`);
    expect(repeated).toEqual([]);
  });
  it('each concept type is declared once and restated nowhere', () => {
    const wrong: string[] = [];
    const shapes = typeShapes();
    for (const c of CONCEPT_TYPES) {
      const declared = shapes.filter((t) => t.name === c.name).map((t) => t.at);
      if (declared.length !== 1 || !declared[0]!.startsWith(`${c.file}:`)) {
        wrong.push(`${c.name} declared at ${declared.join(', ') || 'nowhere'}, expected once in ${c.file}`);
      }
      for (const t of shapes) {
        if (t.name === c.name) continue;
        const restates = Object.entries(c.members).every(([k, types]) => types.includes(t.members.get(k) ?? ''));
        const what = `${t.name ?? 'a type literal'} restates ${c.name} (${Object.keys(c.members).join(', ')})`;
        if (restates) wrong.push(`${t.at}: ${what}: use or extend it`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('retired concept names stay retired', () => {
    const found = scan((node) => {
      const name =
        ts.isInterfaceDeclaration(node) || ts.isTypeAliasDeclaration(node)
          ? node.name.text
          : ts.isPropertySignature(node) || ts.isPropertyDeclaration(node)
            ? node.name.getText()
            : undefined;
      if (name === undefined || RETIRED_NAMES[name] === undefined) return undefined;
      // `blockHashes` stays the engine's block hashes of a KV event (and the WASM helper's name); only a prompt's pair is retired.
      const kvEvent =
        name === 'blockHashes' && /^src\/(events|mocker|replay)\//.test(relative(ROOT, node.getSourceFile().fileName));
      return kvEvent ? undefined : `${name}: now ${RETIRED_NAMES[name]}`;
    });
    expect(found).toEqual([]);
  });

  it('a (workerId, dpRank) pair of parameters is a WorkerRank unless a @rank-numbers tag says why', () => {
    const pairs = scan((node, text) => {
      if (!ts.isFunctionLike(node)) return undefined;
      const params = node.parameters;
      const i = params.findIndex((p) => p.name.getText() === 'workerId');
      // An optional rank means "the worker, or one of its ranks": not the pair.
      const pair = i !== -1 && params[i + 1]?.name.getText() === 'dpRank' && params[i + 1]!.questionToken === undefined;
      // The reason may sit on the function or, for a class whose whole API takes the numbers, on the class.
      const owner = ts.isClassLike(node.parent) ? node.parent : undefined;
      const tagged = [documented(node), ...(owner !== undefined ? [owner] : [])].some((n) =>
        hasTag(n, text, 'rank-numbers'),
      );
      return pair && !tagged ? (node.name?.getText() ?? '(anonymous)') : undefined;
    });
    expect(pairs).toEqual([]);
  });

  it('a field or option holding a logger is named logger', () => {
    const named = scan((node) => {
      if (!ts.isPropertySignature(node) && !ts.isPropertyDeclaration(node) && !ts.isParameter(node)) return undefined;
      const type = node.type?.getText() ?? '';
      return /^#?log$/.test(node.name.getText()) && /\bLogger\b/.test(type)
        ? `${node.name.getText()}: ${type}`
        : undefined;
    });
    expect(named).toEqual([]);
  });

  it('no input type is named ...Init, ...Deps, ...Parts, ...Env or Resolved...', () => {
    const named = scan((node) => {
      const declared = ts.isInterfaceDeclaration(node) || ts.isTypeAliasDeclaration(node) ? node.name.text : '';
      if (INPUT_TYPE_NAME.test(declared)) return declared;
      if (!ts.isConstructorDeclaration(node)) return undefined;
      const inputs = node.parameters.map((p) =>
        p.type !== undefined && ts.isTypeReferenceNode(p.type) ? p.type.typeName.getText() : '',
      );
      const bad = inputs.filter((t) => INPUT_TYPE_NAME.test(t));
      return bad.length > 0 ? `constructor input ${bad.join(', ')}` : undefined;
    });
    expect(named).toEqual([]);
  });
});
