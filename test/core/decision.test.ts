/**
 * The decision's candidate rows (decision.ts): carved from unzeroed shared chunks, so a row must be written whole;
 * `breakdown` is public, and must hold nothing a decision did not write.
 */
import { describe, expect, it } from 'vitest';
import { RoutingDecision, takeBreakdown, writeBreakdown, writeProbability } from '../../src/core/decision.js';

const decision = (breakdown: Float64Array, n: number, temperature: number): RoutingDecision =>
  new RoutingDecision({
    requestId: 'r',
    workerId: 1,
    dpRank: 0,
    overlapBlocks: 0,
    maxOverlapBlocks: 0,
    requiredBlocks: 1,
    isl: 16,
    prefillTokens: 16,
    cost: 1,
    booked: false,
    pinned: false,
    temperature,
    timing: { hashingMs: 0, matchingMs: 0, schedulingMs: 0, totalMs: 0 },
    queuedMs: 0,
    breakdown,
    candidateCount: n,
  });

describe('decision breakdown', () => {
  it('writes every field of a row, so no byte of a dirty chunk survives', () => {
    const rows = takeBreakdown(3);
    rows.fill(Number.NaN); // what an unzeroed chunk may hold
    for (let i = 0; i < 3; i++) writeBreakdown(rows, i, 10 + i, 0, i, 100, 5, 2, 1.5);
    expect(rows.some(Number.isNaN)).toBe(false);
    expect(decision(rows, 3, 0).candidates.map((c) => c.probability)).toEqual([undefined, undefined, undefined]);
  });

  it('keeps the probabilities softmax writes after the rows', () => {
    const rows = takeBreakdown(2);
    for (let i = 0; i < 2; i++) writeBreakdown(rows, i, 1 + i, 0, 0, 0, 0, 0, i);
    writeProbability(rows, 0, 0.25);
    writeProbability(rows, 1, 0.75);
    expect(decision(rows, 2, 0.5).candidates.map((c) => [c.workerId, c.probability])).toEqual([
      [1, 0.25],
      [2, 0.75],
    ]);
  });
});
