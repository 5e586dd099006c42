/**
 * The WASM side of one prefix index: its pointer into the module, freed at `dispose()` or when the owning
 * `PrefixIndex` is garbage collected, and what happens when the module traps in a call on it.
 *
 * A trap (the allocator's out-of-memory: a failed `memory.grow` ends in `unreachable`; an abort) leaves the
 * index's state half changed, so it is never used again: the index is discarded (its memory freed, a fresh
 * empty one made with room for the registered slots), its listeners told, and the trap becomes an
 * `IndexMemoryError`. The module allocates before it stores a pointer to the allocation, so freeing a
 * trapped index frees only what it allocated; a block the trap left unlinked stays behind.
 */
import { IndexMemoryError, KvgateError } from '../errors/index.js';
import { failIndexAllocation, isWasmTrap, type WasmModule } from './instance.js';

const registry = new FinalizationRegistry<{ m: WasmModule; ptr: number }>(({ m, ptr }) => m.exports.idxFree(ptr));

export class IndexHandle {
  readonly #m: WasmModule;
  readonly #owner: object;
  /** How many slot ids the owner has handed out: a fresh index makes room for them. */
  readonly #slotCount: () => number;
  readonly #listeners = new Set<(err: IndexMemoryError) => void>();
  /** 0 after a discard whose fresh index could not be made: made at the next use. */
  #ptr: number;
  #freed = false;
  /** Test hook (`failNextAllocation`): the next allocation in a guarded call on this index fails. */
  #failArmed = false;

  constructor(m: WasmModule, owner: object, slotCount: () => number) {
    this.#m = m;
    this.#owner = owner;
    this.#slotCount = slotCount;
    this.#ptr = this.#create();
  }

  /** The index's pointer. @throws KvgateError KVG_ERR_WASM after `dispose()`; IndexMemoryError when none can be made. */
  ptr(): number {
    if (this.#freed) throw new KvgateError('KVG_ERR_WASM', 'PrefixIndex used after dispose()');
    if (this.#ptr === 0) this.#ptr = this.#create();
    return this.#ptr;
  }

  /** Frees the index's WASM memory now. Idempotent. */
  dispose(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.#release();
  }

  onDiscard(listener: (err: IndexMemoryError) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Test hook: the next allocation the module makes in a call on this index fails as an exhausted memory does. */
  failNextAllocation(): void {
    this.#failArmed = true;
  }

  /** Runs a sequence of WASM calls on the index; a trap discards it and is thrown as an IndexMemoryError (`op`). */
  guard<T>(op: string, call: () => T): T {
    if (this.#failArmed) failIndexAllocation(1);
    try {
      return call();
    } catch (err) {
      if (!isWasmTrap(err)) throw err;
      this.#failArmed = false;
      throw this.#discard(op, err);
    } finally {
      if (this.#failArmed) failIndexAllocation(0); // the call allocated nothing: armed for the next
    }
  }

  #discard(op: string, cause: unknown): IndexMemoryError {
    this.#release();
    try {
      this.#ptr = this.#create();
    } catch (err) {
      if (!(err instanceof IndexMemoryError)) throw err;
      // Still no memory: the next use tries again.
    }
    const err = new IndexMemoryError(op, { cause });
    for (const l of this.#listeners) l(err);
    return err;
  }

  #release(): void {
    const ptr = this.#ptr;
    this.#ptr = 0;
    if (ptr === 0) return;
    registry.unregister(this.#owner);
    try {
      this.#m.exports.idxFree(ptr);
    } catch (err) {
      // Freeing met a trap too: what is left of the old index stays behind, the next starts anyway.
      if (!isWasmTrap(err)) throw err;
    }
  }

  /** A fresh empty index with room for the registered slots. */
  #create(): number {
    const e = this.#m.exports;
    let ptr = 0;
    try {
      ptr = e.idxNew();
      const slots = this.#slotCount();
      if (slots > 0) e.idxEnsureSlot(ptr, slots - 1);
    } catch (err) {
      if (!isWasmTrap(err)) throw err;
      if (ptr !== 0) this.#m.exports.idxFree(ptr);
      throw new IndexMemoryError('index creation', { cause: err });
    }
    registry.register(this.#owner, { m: this.#m, ptr }, this.#owner);
    return ptr;
  }
}
