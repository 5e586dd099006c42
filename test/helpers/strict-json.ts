/**
 * JSON read as a strict ingester reads it: duplicate member names are an
 * error, not "the last one wins" (`JSON.parse`'s rule). Parsed with momoa,
 * which keeps every member of an object in its syntax tree.
 */
import { parse, type AnyNode } from '@humanwhocodes/momoa';

/** The dotted paths of every member name that occurs twice in one object of `text` (empty when none). */
export function duplicateKeys(text: string): string[] {
  const found: string[] = [];
  const walk = (node: AnyNode, path: string): void => {
    if (node.type === 'Object') {
      const seen = new Set<string>();
      for (const m of node.members) {
        const name = m.name.type === 'String' ? m.name.value : m.name.name;
        if (seen.has(name)) found.push(path === '' ? name : `${path}.${name}`);
        seen.add(name);
        walk(m.value, path === '' ? name : `${path}.${name}`);
      }
    } else if (node.type === 'Array') {
      node.elements.forEach((e, i) => walk(e.value, `${path}[${i}]`));
    }
  };
  walk(parse(text).body, '');
  return found;
}
