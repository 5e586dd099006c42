/**
 * The shape rules a reader relies on, checked on the TypeScript syntax tree
 * of src/ and workers/ (assembly/ and the bench harness are outside them):
 *
 * - no file over 450 lines and no function over 80 lines, unless a `@long`
 *   tag in the file's (or the function's) leading comment says why (a table,
 *   a generated list);
 * - one name per concept: no exported name is declared in two files, and a
 *   string-literal union that names a concept (the worker role, the engine
 *   dialect, the router mode) is spelled out in one place only.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;
const MAX_FILE_LINES = 450;
const MAX_FUNCTION_LINES = 80;

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

/** The leading comments of a node (its JSDoc and line comments) carry a `@long` reason. */
function hasLongTag(node: ts.Node, text: string): boolean {
  const ranges = ts.getLeadingCommentRanges(text, node.getFullStart()) ?? [];
  return ranges.some((r) => /@long\s+\S/.test(text.slice(r.pos, r.end)));
}

function lineOf(sf: ts.SourceFile, pos: number): number {
  return sf.getLineAndCharacterOfPosition(pos).line + 1;
}

function isFunctionLike(node: ts.Node): node is ts.FunctionLikeDeclaration {
  return ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node) || ts.isArrowFunction(node) || ts.isFunctionExpression(node)
    || ts.isConstructorDeclaration(node) || ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node);
}

/** The node whose leading comment documents a function (its variable statement for `const f = () => ...`). */
function documented(node: ts.Node): ts.Node {
  let n: ts.Node = node;
  while (n.parent !== undefined && (ts.isVariableDeclaration(n.parent) || ts.isVariableDeclarationList(n.parent) || ts.isVariableStatement(n.parent)
    || ts.isPropertyAssignment(n.parent) || ts.isPropertyDeclaration(n.parent))) n = n.parent;
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

describe('shape', () => {
  it(`no file over ${MAX_FILE_LINES} lines without a @long reason`, () => {
    const long = sources
      .filter(({ text, sf }) => text.split('\n').length > MAX_FILE_LINES && !(sf.statements[0] !== undefined && hasLongTag(sf.statements[0], text)))
      .map(({ rel, text }) => `${rel}: ${text.split('\n').length} lines`);
    expect(long).toEqual([]);
  });

  it(`no function over ${MAX_FUNCTION_LINES} lines without a @long reason`, () => {
    const long: string[] = [];
    for (const { rel, text, sf } of sources) {
      const visit = (node: ts.Node): void => {
        if (isFunctionLike(node) && node.body !== undefined) {
          const lines = lineOf(sf, node.getEnd()) - lineOf(sf, node.getStart()) + 1;
          if (lines > MAX_FUNCTION_LINES && !hasLongTag(documented(node), text)) long.push(`${rel}:${lineOf(sf, node.getStart())} ${functionName(node)}: ${lines} lines`);
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
        const exported = ts.canHaveModifiers(st) && (ts.getModifiers(st) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword);
        if (!exported) continue;
        const names = ts.isVariableStatement(st)
          ? st.declarationList.declarations.map((d) => d.name.getText())
          : (ts.isInterfaceDeclaration(st) || ts.isTypeAliasDeclaration(st) || ts.isClassDeclaration(st) || ts.isFunctionDeclaration(st) || ts.isEnumDeclaration(st)) && st.name !== undefined
            ? [st.name.text] : [];
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
        if (ts.isUnionTypeNode(node) && node.types.every((t) => ts.isLiteralTypeNode(t) && ts.isStringLiteral(t.literal))) {
          const key = node.types.map((t) => ((t as ts.LiteralTypeNode).literal as ts.StringLiteral).text).sort().join('|');
          const concept = CONCEPT_UNIONS[key];
          if (concept !== undefined) seen.set(concept, [...(seen.get(concept) ?? []), `${rel}:${lineOf(sf, node.getStart())}`]);
        }
        ts.forEachChild(node, visit);
      };
      visit(sf);
    }
    const repeated = [...seen].filter(([, at]) => at.length > 1).map(([c, at]) => `${c}: ${at.join(', ')}`);
    expect(repeated).toEqual([]);
  });
});
