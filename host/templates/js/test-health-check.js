// Unit tests of {{name}}.js, run natively against test/fake-host.js: ./test.sh (or npm test).
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { check, describe, init } from '../{{name}}.js';
import { NOT_GRANTED_KV, get, host, reset } from './fake-host.js';

beforeEach(() => reset({ lease: 'leader', holder: 'replica-a', epoch: 7n }));

test('passes by default', () => {
  assert.equal(init([]), undefined);
  assert.equal(check('active'), undefined);
  assert.equal(check('standby'), undefined);
  assert.deepEqual(host.lines(), ['checking lease "leader" as replica-a (fail = never)']);
  assert.deepEqual(host.lines('debug'), ['active check passed', 'standby check passed']);
});

test('fails the role config names', () => {
  init([['fail', 'active']]);
  const expected = 'active check failed: config fail = "active"';
  assert.deepEqual(check('active'), { tag: 'err', val: expected });
  assert.equal(check('standby'), undefined);
});

test('a value out of the list fails init', () => {
  assert.match(init([['fail', 'sometimes']]).val, /sometimes/);
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
