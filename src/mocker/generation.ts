/**
 * The OpenAI endpoints of the simulated engine: /v1/completions and
 * /v1/chat/completions (validation as vLLM does it, the P/D handoff through
 * the worker's protocol, one request on one engine rank, the answer through
 * ResponseWriter), plus /tokenize and /detokenize.
 *
 * Latency histograms are observed here, in wall-clock seconds from the
 * request's arrival, because only the HTTP layer sees arrival.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  parseJson,
  probeInlineSystem,
  readBody,
  sendJson,
  type AgentApi,
  type InlineSystemMode,
} from '../common/index.js';
import { agentAnswerWriter, agentChatBody, isAgentKind } from './agent-endpoints.js';
import type { AnswerWriter } from './agent-writer.js';
import { KvgateError } from '../errors/index.js';
import { inlineSystemRendererOf, type TextTokenizer } from '../tokenizer/index.js';
import { contextRefusal } from './context-refusal.js';
import type { CoreRequest, FinishedRequest } from './engine-types.js';
import type { EngineMetrics } from './engine-metrics.js';
import type { FaultController } from './faults.js';
import type { HandoffPlan, HandoffProtocol } from './handoff.js';
import { parseGenerateRequest, usage, type GenerateRequest, type ResponseMeta } from './openai-protocol.js';
import type { FilledMockerOptions } from './options.js';
import { PacedWriter } from './paced-writer.js';
import { pickRank, type EngineRank } from './ranks.js';
import type { RequestListener } from './realtime-engine.js';
import { ResponseWriter, type StreamFailure } from './response-writer.js';

/** The largest request body the engine reads (vLLM has no limit of its own; this only bounds memory). */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * The body as text (kept: bootstrap rooms are parsed from it beyond 2^53) and as JSON.
 * @throws KvgateError KVG_ERR_BODY_TOO_LARGE, KVG_ERR_INVALID_JSON
 */
export async function readJsonBody(req: IncomingMessage): Promise<{ raw: string; body: unknown }> {
  const raw = (await readBody(req, MAX_BODY_BYTES)).toString('utf8');
  return { raw, body: parseJson(raw) };
}

export type GenerateKind = 'completion' | 'chat' | AgentApi;

/** What generation reads from its worker; `ranks` and `lifetime` change on restart. */
export interface GenerationOptions {
  readonly options: FilledMockerOptions;
  readonly tokenizer: TextTokenizer;
  readonly faults: FaultController;
  readonly metrics: EngineMetrics;
  readonly handoff: HandoffProtocol;
  /** Text of each token id generation samples. */
  readonly tokenText: ReadonlyMap<number, string>;
  ranks(): readonly EngineRank[];
  /** Aborted when the engine crashes: outgoing P/D calls and engine requests stop. */
  lifetime(): AbortSignal;
}

/** One validated request, ready for its rank. */
interface Admitted {
  readonly arrival: number;
  readonly tokens: number[];
  readonly maxTokens: number;
  readonly loraName: string | undefined;
  readonly plan: HandoffPlan;
  readonly signal: AbortSignal;
  /** The agent API whose answer shape the request gets (undefined: OpenAI's). */
  readonly agent: AgentApi | undefined;
}

export class Generation {
  readonly #deps: GenerationOptions;
  /** The sampled vocabulary in a fixed order (logprob alternatives are drawn from it). */
  readonly #vocab: readonly number[];
  /** `anthropic_inline_system: auto` as the chat template settles it, probed at the first Messages request. */
  #inlineSystem: Promise<InlineSystemMode> | undefined;

  constructor(deps: GenerationOptions) {
    this.#deps = deps;
    this.#vocab = [...deps.tokenText.keys()];
  }

  /** Where a Messages body's inline system messages go: the option, `auto` settled as vLLM settles it (once). */
  #inlineSystemMode(agent: AgentApi): InlineSystemMode | Promise<InlineSystemMode> {
    const option = this.#deps.options.anthropicInlineSystem;
    if (option !== 'auto' || agent !== 'messages') return option === 'auto' ? 'preserve' : option;
    this.#inlineSystem ??= probeInlineSystem(inlineSystemRendererOf(this.#deps.tokenizer)).then((v) => v.mode);
    return this.#inlineSystem;
  }

  /** POST /v1/completions and /v1/chat/completions. @throws KvgateError (answered by the caller as an OpenAI error) */
  async generate(kind: GenerateKind, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    const { raw, body } = await readJsonBody(req);
    const d = this.#deps;
    if (d.faults.shouldFailRequest()) {
      d.metrics.countInjectedError();
      const status = d.faults.settings.errorStatus;
      const code =
        status === 503 ? 'KVG_ERR_SHUTTING_DOWN' : status === 502 ? 'KVG_ERR_ENGINE_FAILED' : 'KVG_ERR_INTERNAL';
      throw new KvgateError(code, `injected fault: the engine failed this request with ${status} (error_rate)`, {});
    }
    const agent = isAgentKind(kind) ? kind : undefined;
    // An agent API's body runs as the chat request vLLM's front end converts it to.
    const chat =
      agent === undefined
        ? undefined
        : agentChatBody(agent, body, await this.#inlineSystemMode(agent), Buffer.from(raw));
    const p =
      chat === undefined
        ? parseGenerateRequest(kind as 'completion' | 'chat', body, raw)
        : parseGenerateRequest('chat', chat.body, JSON.stringify(chat.body), { toolsJson: chat.toolsJson });
    const { tokens, maxTokens, loraName } = await this.#validate(p);

    // Client gone (or engine crash): cancel outgoing P/D calls and the engine request.
    const cancel = new AbortController();
    const onGone = (): void => cancel.abort();
    res.on('close', onGone);
    const signal = AbortSignal.any([cancel.signal, d.lifetime()]);
    try {
      const plan = await d.handoff.prepare(p, tokens.length, signal);
      if (plan === undefined || signal.aborted) return;
      try {
        await this.#run(p, req, res, {
          arrival,
          tokens,
          maxTokens: plan.maxTokens ?? maxTokens,
          loraName,
          plan,
          signal,
          agent,
        });
      } catch (err) {
        plan.failed?.(err);
        throw err;
      }
    } finally {
      res.off('close', onGone);
    }
  }

  /** POST /tokenize: a completion or chat body's prompt as token ids. */
  async tokenize(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { raw, body } = await readJsonBody(req);
    const b = body as Record<string, unknown>;
    const kind = b !== null && typeof b === 'object' && 'messages' in b ? 'chat' : 'completion';
    const p = parseGenerateRequest(kind, body, raw);
    const tokens = await this.#promptTokens(p);
    sendJson(res, 200, {
      count: tokens.length,
      max_model_len: this.#deps.options.maxModelLen,
      tokens,
      token_strs: null,
    });
  }

  /** POST /detokenize: special tokens kept, as vLLM's (its tokenizer's `decode` without `skip_special_tokens`). */
  async detokenize(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { body } = await readJsonBody(req);
    const tokens = (body as { tokens?: unknown } | null)?.tokens;
    if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t) && t >= 0)) {
      throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'tokens must be a list of token ids', { param: 'tokens' });
    }
    sendJson(res, 200, { prompt: await this.#deps.tokenizer.decode(tokens as number[], { skipSpecialTokens: false }) });
  }

  /** The served model or adapter, the prompt tokens, and the imitated engine's length checks. */
  async #validate(p: GenerateRequest): Promise<{ tokens: number[]; maxTokens: number; loraName: string | undefined }> {
    const o = this.#deps.options;
    if (p.model !== undefined && p.model !== o.model && !o.loraNames.includes(p.model)) {
      throw new KvgateError('KVG_ERR_MODEL_NOT_FOUND', `The model \`${p.model}\` does not exist.`, { param: 'model' });
    }
    const loraName = p.model !== undefined && p.model !== o.model ? p.model : undefined;
    // As vLLM: a priority other than 0 needs a policy that reads it.
    if (
      p.priority !== undefined &&
      p.priority !== 0 &&
      o.schedulingPolicy !== 'priority' &&
      o.evictionPolicy !== 'priority'
    ) {
      throw new KvgateError(
        'KVG_ERR_INVALID_REQUEST',
        `priority ${p.priority} needs --scheduling-policy priority or --eviction-policy priority`,
        { param: 'priority' },
      );
    }
    const tokens = await this.#promptTokens(p);
    const param = p.kind === 'chat' ? 'messages' : 'prompt';
    if (tokens.length === 0)
      throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'the prompt is empty after tokenization', { param });
    const maxTokens = p.maxTokens ?? o.defaultMaxTokens;
    // The imitated engine's words and body (context-refusal.ts).
    const refusal = contextRefusal(o.engine, tokens.length, maxTokens, o.maxModelLen);
    if (refusal !== undefined) throw refusal;
    const blocksNeeded = Math.ceil((tokens.length + maxTokens - 1) / o.blockSize);
    if (blocksNeeded > o.numGpuBlocks) {
      throw new KvgateError(
        'KVG_ERR_INVALID_REQUEST',
        `the request needs ${blocksNeeded} KV blocks (${tokens.length} prompt + ${maxTokens} completion tokens)` +
          ` but the engine has ${o.numGpuBlocks}`,
        { param },
      );
    }
    return { tokens, maxTokens, loraName };
  }

  /** The prompt as token ids: token-id prompts as given, text and chat through the tokenizer. */
  async #promptTokens(p: GenerateRequest): Promise<number[]> {
    const tokenizer = this.#deps.tokenizer;
    if (p.prompt.kind === 'tokens') {
      const vocab = tokenizer.vocabSize;
      const i = p.prompt.tokens.findIndex((t) => t >= vocab);
      if (i >= 0)
        throw new KvgateError(
          'KVG_ERR_INVALID_REQUEST',
          `token id ${p.prompt.tokens[i]} at index ${i} is out of vocabulary (size ${vocab})`,
          { param: 'prompt' },
        );
      return p.prompt.tokens;
    }
    if (p.prompt.kind === 'text') return tokenizer.encode(p.prompt.text, { addSpecialTokens: p.addSpecialTokens });
    let text: string;
    try {
      text = tokenizer.renderChat(p.prompt.messages, {
        addGenerationPrompt: true,
        tools: p.prompt.tools,
        toolsJson: p.prompt.toolsJson,
        extra: p.prompt.templateKwargs,
      });
    } catch (err) {
      if (err instanceof KvgateError && err.code === 'KVG_ERR_INVALID_ARGUMENT')
        throw new KvgateError('KVG_ERR_INVALID_REQUEST', err.message, { param: 'messages' });
      throw err;
    }
    return tokenizer.encode(text, { addSpecialTokens: p.addSpecialTokens });
  }

  /** Runs the request on its rank; resolves when the answer is written or the request was aborted. */
  #run(p: GenerateRequest, req: IncomingMessage, res: ServerResponse, x: Admitted): Promise<void> {
    const o = this.#deps.options;
    const ranks = this.#deps.ranks();
    const rankIndex = pickRank(ranks, p.dpRank, req.headers['x-data-parallel-rank'], x.plan.forcedRank);
    const rank = ranks[rankIndex]!;
    const coreId = randomUUID();
    const header = req.headers['x-request-id'];
    const baseId = typeof header === 'string' && header !== '' ? header : randomUUID().replaceAll('-', '');
    const meta: ResponseMeta = {
      id: `${x.agent === 'messages' ? 'msg' : x.agent === 'responses' ? 'resp' : p.kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${baseId}`,
      created: Math.floor(Date.now() / 1000),
      model: p.model ?? o.model,
    };
    const coreReq: CoreRequest = {
      id: coreId,
      promptTokens: x.tokens,
      maxTokens: x.maxTokens,
      seed: p.seed ?? o.seed,
      loraName: x.loraName,
      cacheSalt: p.cacheSalt,
      remotePrefill: x.plan.remotePrefill,
      holdBlocksMs: x.plan.holdBlocksMs,
      priority: p.priority,
    };
    const textOf = (id: number): string => this.#deps.tokenText.get(id) ?? '';
    const answer: AnswerWriter =
      x.agent !== undefined
        ? agentAnswerWriter(x.agent, res, p, meta, x.tokens.length, x.maxTokens, {
            stallAfter: this.#deps.faults.settings.stallAfterTokens,
            failAfter: this.#streamFailure(),
          })
        : new ResponseWriter(
            res,
            p,
            meta,
            x.tokens.length,
            x.maxTokens,
            this.#vocab,
            textOf,
            this.#deps.faults.settings.stallAfterTokens,
            x.tokens,
            this.#streamFailure(),
          );
    // A stream is written at its client's pace; the request runs on meanwhile (paced-writer.ts).
    const out = p.stream ? new PacedWriter(res, answer) : answer;
    return new Promise<void>((resolve, reject) => {
      let finished = false;
      const onAbort = (): void => {
        if (finished) return;
        finished = true;
        rank.engine.abort(coreId);
        if (!res.destroyed) res.destroy();
        resolve();
      };
      const onEnd = (): void => {
        finished = true;
        x.signal.removeEventListener('abort', onAbort);
        resolve();
      };
      try {
        rank.engine.submit(coreReq, this.#listener(rankIndex, coreId, x, out, onEnd));
      } catch (err) {
        reject(err);
        return;
      }
      x.signal.addEventListener('abort', onAbort, { once: true });
      out.open();
    });
  }

  /** The `errorAfterTokens` fault as a new answer takes it (null: off). */
  #streamFailure(): StreamFailure | null {
    const { errorAfterTokens, errorStatus } = this.#deps.faults.settings;
    return errorAfterTokens === null ? null : { tokens: errorAfterTokens, status: errorStatus };
  }

  /** The engine's callbacks for one request: latency metrics, the answer, the protocol's end. */
  #listener(rankIndex: number, coreId: string, x: Admitted, out: AnswerWriter, onEnd: () => void): RequestListener {
    const metrics = this.#deps.metrics;
    let cached = 0;
    let lastTokenAt = 0;
    return {
      onAdmitted: (c) => {
        cached = c;
      },
      onToken: (tokenId, index) => {
        const now = performance.now();
        if (index === 0) metrics.observeFirstToken(rankIndex, (now - x.arrival) / 1000, 0);
        else metrics.observeInterToken(rankIndex, (now - lastTokenAt) / 1000);
        lastTokenAt = now;
        out.token(tokenId, this.#deps.tokenText.get(tokenId) ?? '', index, cached);
      },
      onFinish: (info: FinishedRequest) => {
        // Done on the engine: an abort from now on has nothing to cancel (the promise settles after this callback).
        onEnd();
        metrics.observeFinished(rankIndex, (performance.now() - x.arrival) / 1000);
        const u = usage(info.promptTokens, info.outputTokens, info.cachedTokens);
        x.plan.finished?.(info);
        out.finish(u, () => this.#deps.handoff.responseParams({ info, rank: rankIndex, requestId: coreId }));
      },
    };
  }
}
