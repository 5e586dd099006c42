import { describe, expect, it } from 'vitest';
import {
  KV_ROUTER_CONFIG_FIELDS,
  KV_ROUTER_DEFAULTS,
  kvEventsEnabled,
  kvRouterOptionsFromDynamo,
  parseRouterConfigOverride,
  resolveKvRouterConfig,
  type KvRouterOptions,
} from '../../src/core/config.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';
import { routerPresetOptions } from '../../src/core/router-presets.js';

const configError = kvgateErrorOf;

describe('KvRouterConfig', () => {
  it("defaults are Dynamo v1.5's but for the prefill scale and kvgate's own terms, and the result is deep-frozen", () => {
    const c = resolveKvRouterConfig();
    expect(c).toEqual(KV_ROUTER_DEFAULTS);
    expect(c.overlapScoreCredit).toBe(1);
    expect([c.prefillLoadScale, c.routerKvPressureWeight, c.routerKvOverflowWeight]).toEqual([4, 1, 2]);
    // The dynamo preset is Dynamo v1.5's defaults.
    const d = resolveKvRouterConfig(routerPresetOptions('dynamo'));
    expect([d.prefillLoadScale, d.routerKvPressureWeight, d.routerKvOverflowWeight]).toEqual([1, 0, 0]);
    expect(c.hostCacheHitWeight).toBe(0.75);
    expect(c.diskCacheHitWeight).toBe(0.25);
    expect(c.routerTtlSecs).toBe(120);
    expect(c.activeRequestExpirySecs).toBe(300);
    expect(c.routerQueueThreshold).toBeNull();
    expect(Object.isFrozen(c)).toBe(true);
    const t = resolveKvRouterConfig({
      routerQueueThreshold: 2,
      routerQueueByIncomingMissingIsl: [
        [0, 100],
        [50, 10],
      ],
    });
    expect(Object.isFrozen(t.routerQueueByIncomingMissingIsl)).toBe(true);
    expect(Object.isFrozen(t.routerQueueByIncomingMissingIsl![1])).toBe(true);
    expect(() => {
      (t as { routerTemperature: number }).routerTemperature = 3;
    }).toThrow(TypeError);
  });

  it('a negative weight fails at construction naming the field, the value and the reason', () => {
    const e = configError(() => resolveKvRouterConfig({ decodeActiveRequestWeight: -1 }));
    expect(e.code).toBe('KVG_ERR_INVALID_CONFIG');
    expect(e.message).toContain('decodeActiveRequestWeight');
    expect(e.message).toContain('-1');
    expect(e.detail).toMatchObject({ field: 'decodeActiveRequestWeight', value: '-1', reason: 'must be >= 0' });
    for (const field of [
      'overlapScoreCredit',
      'prefillLoadScale',
      'hostCacheHitWeight',
      'diskCacheHitWeight',
      'routerTemperature',
    ] as const) {
      expect(configError(() => resolveKvRouterConfig({ [field]: -0.5 })).detail).toMatchObject({ field });
    }
    expect(configError(() => resolveKvRouterConfig({ routerTemperature: Number.NaN })).detail).toMatchObject({
      reason: 'must be a finite number',
    });
  });

  it('output-block tracking without active-block tracking fails naming the field', () => {
    const e = configError(() =>
      resolveKvRouterConfig({ routerTrackOutputBlocks: true, routerTrackActiveBlocks: false }),
    );
    expect(e.code).toBe('KVG_ERR_INVALID_CONFIG');
    expect(e.detail).toMatchObject({ field: 'routerTrackOutputBlocks' });
    expect(e.message).toMatch(/requires routerTrackActiveBlocks/);
  });

  it('unknown keys are rejected', () => {
    const e = configError(() => resolveKvRouterConfig({ routerTemprature: 1 } as unknown as KvRouterOptions));
    expect(e.detail).toMatchObject({ field: 'routerTemprature', reason: 'unknown field' });
  });

  it('other cross-field rules and value checks', () => {
    expect(
      configError(() => resolveKvRouterConfig({ useKvEvents: false, routerPredictedTtlSecs: 5 })).detail,
    ).toMatchObject({ field: 'routerPredictedTtlSecs' });
    expect(
      configError(() => resolveKvRouterConfig({ routerQueueByIncomingMissingIsl: [[0, 10]] })).detail,
    ).toMatchObject({ field: 'routerQueueByIncomingMissingIsl' });
    expect(
      configError(() => resolveKvRouterConfig({ routerQueueThreshold: 1, routerQueueByIncomingMissingIsl: [[5, 10]] }))
        .detail,
    ).toMatchObject({ field: 'routerQueueByIncomingMissingIsl[0]', reason: 'the first floor must be 0' });
    expect(
      configError(() =>
        resolveKvRouterConfig({
          routerQueueThreshold: 1,
          routerQueueByIncomingMissingIsl: [
            [0, 10],
            [0, 5],
          ],
        }),
      ).detail,
    ).toMatchObject({ field: 'routerQueueByIncomingMissingIsl[1]' });
    expect(
      configError(() => resolveKvRouterConfig({ routerQueueThreshold: 1, routerQueueByIncomingMissingIsl: [[0, 0]] }))
        .detail,
    ).toMatchObject({ reason: 'the cap must be > 0' });
    expect(configError(() => resolveKvRouterConfig({ routerQueueThreshold: 0 })).detail).toMatchObject({
      field: 'routerQueueThreshold',
    });
    expect(configError(() => resolveKvRouterConfig({ routerQueuePolicy: 'lifo' as 'fcfs' })).detail).toMatchObject({
      field: 'routerQueuePolicy',
    });
    expect(configError(() => resolveKvRouterConfig({ useKvEvents: 'yes' as unknown as boolean })).detail).toMatchObject(
      { reason: 'must be a boolean' },
    );
    expect(configError(() => resolveKvRouterConfig({ routerTtlSecs: 0 })).detail).toMatchObject({
      field: 'routerTtlSecs',
      reason: 'must be > 0',
    });
  });

  it('the deprecated overlapScoreWeight maps to prefillLoadScale; 0 also zeroes the credit', () => {
    expect(resolveKvRouterConfig({ overlapScoreWeight: 2 }).prefillLoadScale).toBe(2);
    const zero = resolveKvRouterConfig({ overlapScoreWeight: 0 });
    expect(zero.prefillLoadScale).toBe(0);
    expect(zero.overlapScoreCredit).toBe(0);
    expect(kvEventsEnabled(zero)).toBe(false);
    expect('overlapScoreWeight' in zero).toBe(false);
    expect(
      configError(() => resolveKvRouterConfig({ overlapScoreWeight: 2, prefillLoadScale: 3 })).detail,
    ).toMatchObject({ field: 'overlapScoreWeight' });
    expect(kvEventsEnabled(resolveKvRouterConfig())).toBe(true);
    expect(kvEventsEnabled(resolveKvRouterConfig({ useKvEvents: false }))).toBe(false);
  });

  it('every field has a Dynamo name, and Dynamo names parse to options', () => {
    for (const key of Object.keys(KV_ROUTER_DEFAULTS)) expect(KV_ROUTER_CONFIG_FIELDS).toHaveProperty(key);
    expect(kvRouterOptionsFromDynamo({ router_temperature: 0.2, overlap_score_credit: 2 })).toEqual({
      routerTemperature: 0.2,
      overlapScoreCredit: 2,
    });
    expect(configError(() => kvRouterOptionsFromDynamo({ router_temprature: 1 })).code).toBe('KVG_ERR_INVALID_CONFIG');
  });
});

describe('RouterConfigOverride', () => {
  it('accepts camelCase and Dynamo wire names, rejects unknown keys and bad values as client errors', () => {
    expect(parseRouterConfigOverride({ router_temperature: 0.5, assumeKvReuse: false })).toEqual({
      routerTemperature: 0.5,
      assumeKvReuse: false,
    });
    expect(parseRouterConfigOverride({ overlap_score_weight: 0 })).toEqual({
      prefillLoadScale: 0,
      overlapScoreCredit: 0,
    });
    const e = configError(() => parseRouterConfigOverride({ router_temperature: -1 }));
    expect(e.code).toBe('KVG_ERR_INVALID_ARGUMENT');
    expect(e.statusCode).toBe(400);
    expect(e.message).toContain('router_temperature');
    expect(configError(() => parseRouterConfigOverride({ queue_threshold: 1 })).detail).toMatchObject({
      reason: 'unknown field',
    });
    expect(configError(() => parseRouterConfigOverride({ trackPrefillTokens: 'no' })).detail).toMatchObject({
      reason: 'must be a boolean',
    });
    expect(Object.isFrozen(parseRouterConfigOverride({}))).toBe(true);
  });

  it('reads own properties only: prototype member names are unknown fields, here and in the router config', () => {
    for (const key of ['constructor', 'toString', 'hasOwnProperty', '__proto__']) {
      const input = JSON.parse(`{"${key}": 1}`) as Record<string, unknown>;
      expect(configError(() => parseRouterConfigOverride(input)).detail).toMatchObject({ reason: 'unknown field' });
      expect(configError(() => resolveKvRouterConfig(input as KvRouterOptions)).detail).toMatchObject({
        reason: 'unknown field',
      });
    }
  });
});
