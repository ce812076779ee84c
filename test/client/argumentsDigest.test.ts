// Invariant: equal arguments give equal digests whatever the key order; different arguments differ.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { argumentsDigest, canonicalJson } from '../../src/client/submitting/argumentsDigest.js';

describe('argumentsDigest', () => {
  it('ignores key order at every depth', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null } })).toBe(
      '{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}',
    );
    expect(argumentsDigest({ a: 1, b: 2 })).toBe(argumentsDigest({ b: 2, a: 1 }));
    expect(argumentsDigest({ a: 1 })).not.toBe(argumentsDigest({ a: '1' }));
  });

  it('round-trips: canonical JSON parses back to the same value', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(JSON.parse(canonicalJson(value))).toEqual(JSON.parse(JSON.stringify(value)));
      }),
    );
  });
});
