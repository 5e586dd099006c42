/**
 * The module's I/O region as the host reserves it (`WasmModule.reserve`): the host calls the module's
 * `ioReserve` only when the region must grow, and always answers the address the module itself would.
 */
import { describe, expect, it } from 'vitest';
import { wasm } from '../../src/wasm/instance.js';

describe('WasmModule.reserve', () => {
  it("answers the module's own region, growing it only past what the module holds", () => {
    const m = wasm();
    const small = m.reserve(16);
    expect(m.reserve(65536)).toBe(small);
    expect(m.exports.ioReserve(65536)).toBe(small);
    // Past the region: the module moves it, and the host follows.
    const big = m.reserve(1 << 20);
    expect(m.exports.ioReserve(1 << 20)).toBe(big);
    expect(m.reserve(8)).toBe(big);
    // Bytes written at the start of the region stay until the next reservation that grows it.
    const u8 = m.views().u8;
    u8[big] = 0xab;
    expect(m.views().u8[m.reserve((1 << 20) - 1)]).toBe(0xab);
  });
});

describe('WasmModule.views', () => {
  it('follows the memory once growth has detached the views it gave', () => {
    const m = wasm();
    const before = m.views();
    expect(m.views()).toBe(before);
    const pages = m.exports.memory.buffer.byteLength >>> 16;
    // A region past the memory's end makes the module grow it, which detaches every view of the old buffer.
    const at = m.reserve((pages + 4) << 16);
    expect(before.u8.length).toBe(0);
    const after = m.views();
    expect(after === before).toBe(false);
    expect(after.u8.length).toBe(m.exports.memory.buffer.byteLength);
    after.u32[at >>> 2] = 0xfeedbeef;
    expect(m.views().u32[at >>> 2]).toBe(0xfeedbeef);
  });
});
