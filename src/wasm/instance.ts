/**
 * Loads build/kvgate.wasm once per thread and keeps typed-array views over its
 * memory fresh. This is the only file that instantiates the module.
 *
 * Views are re-derived whenever `memory.buffer` changes (memory growth detaches
 * the old buffer), so callers must fetch views through `views()` after any call
 * that may allocate.
 */
import { readFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KvgateError, isKvgateError } from '../errors/index.js';

/** Must equal ABI_VERSION in assembly/index.ts. */
const EXPECTED_ABI_VERSION = 10;

export interface KvgateWasmExports {
  memory: { readonly buffer: ArrayBuffer };
  ABI_VERSION: { readonly value: unknown };
  ioReserve(bytes: number): number;
  xxh3_64(ptr: number, len: number, seedLo: number, seedHi: number): bigint;
  hashPrompt(
    tokens: number,
    nTokens: number,
    blockSize: number,
    flags: number,
    seedLo: number,
    seedHi: number,
    mmOffsets: number,
    mmValues: number,
    outLocal: number,
    outSeq: number,
  ): number;
  chainSequence(local: number, n: number, outSeq: number): void;
  readIdArray(src: number, len: number, dst: number): number;
  idArrayEnd(): number;
  idxNew(): number;
  idxFree(ix: number): void;
  idxEnsureSlot(ix: number, slot: number): void;
  idxStored(ix: number, slot: number, parentPtr: number, n: number, eng: number, local: number): number;
  idxRemoved(ix: number, slot: number, n: number, eng: number): number;
  idxClearSlot(ix: number, slot: number): number;
  idxHolds(ix: number, slot: number, n: number, eng: number, out: number): number;
  idxFindMatches(ix: number, hashes: number, n: number, fromLocal: number, outSlots: number, outDepths: number): number;
  idxExportSlot(ix: number, slot: number, from: number, max: number, out: number, nextOut: number): number;
  idxImportSlot(ix: number, slot: number, n: number, pairs: number): number;
  idxEntries(ix: number): number;
  idxDistinctBlocks(ix: number): number;
  idxBytes(ix: number): number;
  idxSlotBlocks(ix: number, slot: number): number;
  idxEvict(ix: number, target: number): number;
  idxApplyPacked(
    ix: number,
    slot: number,
    words: number,
    wordsEnd: number,
    maxEvents: number,
    group: number,
    blockSize: number,
    budget: number,
    low: number,
    outcomes: number,
    state: number,
  ): number;
  matchStage(ix: number, t: number, n: number, outSlots: number, outDepths: number, outTrieCount: number): number;
  trieNew(): number;
  trieFree(t: number): void;
  trieQuery(t: number, n: number): number;
  trieDepths(t: number, n: number): number;
  trieInsert(t: number, n: number, slot: number): number;
  trieRemoveAt(t: number, end: number, slot: number): number;
  trieRemove(t: number, n: number, slot: number): number;
  trieHeldByOthers(t: number, n: number, slot: number): number;
  trieSize(t: number): number;
  trieNodeCount(t: number): number;
  testFailAllocation(after: number): void;
}

export interface WasmViews {
  u8: Uint8Array;
  u32: Uint32Array;
  u64: BigUint64Array;
}

export interface WasmModule {
  exports: KvgateWasmExports;
  /** Current views over linear memory (re-derived after growth). */
  views(): WasmViews;
  /**
   * The I/O region, with room for at least `bytes` bytes: `exports.ioReserve`, called only for more bytes than
   * any call before asked (the module keeps one region and moves it only to grow it), so most crossings skip a call.
   */
  reserve(bytes: number): number;
}

function findWasmFile(): string {
  const name = process.env.KVGATE_WASM_DEBUG === '1' ? 'kvgate.debug.wasm' : 'kvgate.wasm';
  // Works from src/wasm (tests, tsx) and from dist/src/wasm (built package).
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'build', name);
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new KvgateError('KVG_ERR_WASM', `cannot find build/${name}; run \`npm run build\` first`);
}

// Node's WebAssembly global, typed to the few members used here (lib.dom is not loaded).
interface WebAssemblyApi {
  RuntimeError: new () => Error;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (
    module: object,
    imports: Record<string, Record<string, unknown>>,
  ) => { exports: Record<string, unknown> };
}
const WA = (globalThis as unknown as { WebAssembly: WebAssemblyApi }).WebAssembly;

let loaded: WasmModule | undefined;

/** The module for this thread, instantiated on first use. */
export function wasm(): WasmModule {
  if (loaded !== undefined) return loaded;
  const module = new WA.Module(readFileSync(findWasmFile()));
  const instance = new WA.Instance(module, {
    env: {
      abort(_msg: number, _file: number, line: number, column: number): never {
        throw new KvgateError('KVG_ERR_WASM', `kvgate.wasm aborted at ${line}:${column}`, { trap: true });
      },
    },
  });
  const exports = instance.exports as unknown as KvgateWasmExports;
  const abi = exports.ABI_VERSION.value as number;
  if (abi !== EXPECTED_ABI_VERSION) {
    throw new KvgateError(
      'KVG_ERR_WASM',
      `kvgate.wasm ABI ${abi} does not match the host's ${EXPECTED_ABI_VERSION}; rebuild`,
    );
  }
  let buffer: ArrayBuffer | undefined;
  let current: WasmViews | undefined;
  const views = (): WasmViews => {
    const b = exports.memory.buffer;
    if (b !== buffer || current === undefined) {
      buffer = b;
      current = { u8: new Uint8Array(b), u32: new Uint32Array(b), u64: new BigUint64Array(b) };
    }
    return current;
  };
  // The region the module holds and the most asked of it so far (the module's may be larger); 0 while unknown, so a
  // call that traps while growing it (the module then holds none) is never answered from here.
  let io = 0;
  let ioCap = 0;
  const reserve = (bytes: number): number => {
    if (bytes <= ioCap) return io;
    ioCap = 0;
    io = exports.ioReserve(bytes);
    ioCap = bytes;
    return io;
  };
  loaded = { exports, views, reserve };
  return loaded;
}

/**
 * True for a trap of the module: the `unreachable` a failed `memory.grow` ends in (the allocator's
 * out-of-memory), an abort (an allocation too large), or any other trap. After one, the state the call
 * was changing cannot be trusted.
 */
export function isWasmTrap(err: unknown): boolean {
  return err instanceof WA.RuntimeError || (isKvgateError(err, 'KVG_ERR_WASM') && err.detail?.['trap'] === true);
}

/**
 * Test hook: the `after`-th allocation of a prefix index or prompt trie in this thread's module from now fails
 * exactly as an exhausted memory does (0 disarms). Nothing calls it but tests and the environment hook below.
 */
export function failIndexAllocation(after: number): void {
  wasm().exports.testFailAllocation(after);
}

/**
 * The environment's test hook, `KVGATE_TEST_INDEX_ALLOC_FAILURE=<entries>`: once the KV-event index of a
 * model holds that many (block, slot) entries, its next allocation fails (src/events' applier asks, through
 * `takeAllocationHook`), once per process. Unset (always, outside tests) it never fires.
 */
let allocFailureAtEntries: number | undefined = ((): number | undefined => {
  const v = Number(process.env.KVGATE_TEST_INDEX_ALLOC_FAILURE ?? '');
  return Number.isSafeInteger(v) && v > 0 ? v : undefined;
})();

/** True while the environment's hook waits to fire. */
export function allocationHookPending(): boolean {
  return allocFailureAtEntries !== undefined;
}

/** True once, when an index of `entries` entries reaches the environment's hook: its next allocation is to fail. */
export function takeAllocationHook(entries: number): boolean {
  if (allocFailureAtEntries === undefined || entries < allocFailureAtEntries) return false;
  allocFailureAtEntries = undefined;
  return true;
}
