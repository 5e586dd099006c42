/**
 * The soaks' view of the gateway's memory: `POST /admin/gc` (the gateway
 * runs under `node --expose-gc`, admin on) collects garbage and answers the
 * process's memory.
 */
import { expect } from 'vitest';

export interface Heap {
  heapUsed: number;
  rss: number;
  arrayBuffers: number;
  external: number;
  gcMs: number;
}

/** The gateway's memory after a full collection, asked twice: the first can free what finalizers of the previous one released. */
export async function heapAfterGc(url: string, headers: Record<string, string> = {}): Promise<Heap> {
  let heap: Heap | undefined;
  for (let i = 0; i < 2; i++) {
    const res = await fetch(`${url}/admin/gc`, { method: 'POST', headers });
    expect(res.status).toBe(200);
    heap = (await res.json()) as Heap;
  }
  return heap!;
}

/** Bytes in MiB, two decimals. */
export const mib = (b: number): number => Math.round((b / 1048576) * 100) / 100;
