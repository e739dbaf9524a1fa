// Unit tests of {{name}}.js, run natively against test/fake-host.js: ./test.sh (or npm test).
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { describe, init, reconcile } from '../{{name}}.js';
import { NOT_GRANTED_KV, get, host, reset } from './fake-host.js';

beforeEach(() => reset({ lease: 'leader', holder: 'replica-a', epoch: 7n }));

test('logs each tick with its epoch', () => {
  assert.equal(init([['greeting', 'hi']]), undefined);
  for (const tick of [0n, 1n]) {
    const outcome = reconcile({ lease: 'leader', epoch: 7n, tick });
    assert.deepEqual(outcome, { requeueAfterMs: undefined });
  }
  assert.deepEqual(host.lines(), [
    'starting on lease "leader" as replica-a',
    'hi from epoch 7, tick 0',
    'hi from epoch 7, tick 1',
  ]);
});

test('a misspelt config key fails init', () => {
  const expected = 'unknown config key "greting" (known keys: "greeting")';
  assert.deepEqual(init([['greting', 'hi']]), { tag: 'err', val: expected });
});

test("a host error becomes the call's error in the host's words", () => {
  // Thrown on as it is, the host's error would read as "Error: not-granted: ..." at best; the
  // plugin's error is its case and the host's text, which names what to add to the manifest.
  reset({ kvGranted: false });
  assert.throws(
    () => get('checkpoint'),
    (e) => describe(e) === `not-granted: ${NOT_GRANTED_KV}`,
  );
  assert.equal(describe(new TypeError('bad')), 'TypeError: bad');
});
