/**
 * A tokenizer folder without `tokenizer_config.json` has no chat template: a
 * guessed one (ChatML) renders chat prompts the engine never sees, so routing
 * hashes ids no engine computes and only the prediction metrics show it. The
 * config refuses it at start, naming the way out; an operator who names the
 * template (`chatml` or a Jinja file) gets exactly that template.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, type ConfigProblem } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { demoTokenizerFiles, loadTokenizer } from '../../src/tokenizer/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-tok-template-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const folder = join(dir, 'bare-model');
mkdirSync(folder);
copyFileSync(demoTokenizerFiles().tokenizerJson, join(folder, 'tokenizer.json'));
const json = join(folder, 'tokenizer.json');
const jinja = join(dir, 'plain.jinja');
writeFileSync(jinja, '{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}');

let n = 0;
function load(tokenizer: string) {
  const file = join(dir, `c${n++}.yaml`);
  writeFileSync(
    file,
    `models:\n  - name: m\n    tokenizer: ${tokenizer}\n    workers: [{ id: 1, url: "http://10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }]\n`,
  );
  return loadGatewayConfig({ file, env: {} });
}

function problems(tokenizer: string): ConfigProblem[] {
  try {
    load(tokenizer);
  } catch (err) {
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    return (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
  }
  throw new Error('expected the config to be rejected');
}

const chat = [{ role: 'user', content: 'hello there' }];

describe('a tokenizer without its chat template', () => {
  it('a folder without tokenizer_config.json is refused, naming the file and the way out', () => {
    const [p, ...rest] = problems(folder);
    expect(rest).toEqual([]);
    expect(p!.path).toBe('models[0].tokenizer');
    expect(p!.reason).toContain(`no tokenizer_config.json beside ${json}`);
    expect(p!.reason).toContain('template: chatml | FILE.jinja');
    // The same through the path of tokenizer.json itself.
    expect(problems(json)[0]!.reason).toContain('no tokenizer_config.json');
  });

  it('a named template is accepted and used: chatml, or a Jinja file', () => {
    const chatml = load(`{ json: ${json}, template: chatml }`).models[0]!.tokenizer;
    expect(chatml).toMatchObject({ kind: 'files', files: { tokenizerJson: json, chatTemplate: 'chatml' } });
    const tok = loadTokenizer((chatml as { files: { tokenizerJson: string } }).files);
    expect(tok.renderChat(chat)).toBe('<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n');

    const fromFile = load(`{ json: ${json}, template: ${jinja} }`).models[0]!.tokenizer;
    const plain = loadTokenizer((fromFile as { files: { tokenizerJson: string } }).files);
    expect(plain.renderChat(chat)).toBe('[user] hello there\n');
  });

  it('a template file that does not exist is refused at its field', () => {
    const [p] = problems(`{ json: ${json}, template: ${join(dir, 'missing.jinja')} }`);
    expect(p!.path).toBe('models[0].tokenizer.template');
    expect(p!.reason).toContain('file not found');
  });

  it('a folder with its tokenizer_config.json loads as before', () => {
    writeFileSync(join(dir, 'tokenizer_config.json'), '{}');
    const full = join(dir, 'full-model');
    mkdirSync(full);
    copyFileSync(json, join(full, 'tokenizer.json'));
    copyFileSync(join(dir, 'tokenizer_config.json'), join(full, 'tokenizer_config.json'));
    expect(load(full).models[0]!.tokenizer).toMatchObject({ kind: 'files' });
  });
});
