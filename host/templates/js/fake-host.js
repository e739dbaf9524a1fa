// A fake host for the unit tests: the functions of the interfaces the plugin imports
// (leasehold:plugin/lease, log, kv and sql @0.1.0; test/hooks.mjs maps each of them here), and
// `host`, what they answer from and what the plugin did. Call reset() before each test.

export const host = {};

// What the host says when kv is used without the grant.
export const NOT_GRANTED_KV = "kv is not granted: add [grants] kv = true to the plugin's manifest";

// Sets the fake lease (epoch undefined: this replica does not hold it) and whether kv is
// granted, and forgets the logs and the kv store.
export function reset({ lease = 'leader', holder = 'replica-a', epoch = 7n, kvGranted = true } = {}) {
  host.lease = { name: lease, holder, epoch };
  host.kvGranted = kvGranted;
  host.logs = []; // { level, message }, level as in WIT: 'info'
  host.kv = new Map(); // key -> Uint8Array
  host.lines = (level = 'info') =>
    host.logs.filter((l) => l.level === level).map((l) => l.message);
}
reset();

// A host error as componentize-js delivers it: thrown, with the capability-error as `payload`.
function capabilityError(tag, val) {
  const error = new Error(val === undefined ? tag : `${tag}: ${val}`);
  return Object.assign(error, { payload: { tag, val } });
}

// leasehold:plugin/lease
export function name() {
  return host.lease.name;
}
export function holder() {
  return host.lease.holder;
}
export function epoch() {
  return host.lease.epoch;
}
export function acquiredAtMs() {
  return host.lease.epoch === undefined ? undefined : 1_700_000_000_000n;
}
export function timeLeftMs() {
  return host.lease.epoch === undefined ? undefined : 10_000n;
}
export function shard() {
  return undefined;
}

// leasehold:plugin/log
export function log(level, message) {
  host.logs.push({ level, message });
}

// leasehold:plugin/kv (granted by the manifest's [grants] kv = true)
function granted() {
  if (!host.kvGranted) throw capabilityError('not-granted', NOT_GRANTED_KV);
}
export function get(key) {
  granted();
  return host.kv.get(key);
}
export function put(key, value) {
  granted();
  host.kv.set(key, Uint8Array.from(value));
}
function remove(key) {
  granted();
  return host.kv.delete(key);
}
export { remove as delete };
export function list(prefix, after, limit) {
  granted();
  const keys = [...host.kv.keys()]
    .filter((k) => k.startsWith(prefix) && (after === undefined || k > after))
    .sort();
  const page = keys.slice(0, limit);
  const next = keys.length > limit ? page[page.length - 1] : undefined;
  return { entries: page.map((k) => [k, host.kv.get(k)]), next };
}

// leasehold:plugin/sql: no database in the unit tests.
export function query() {
  throw capabilityError('unavailable', 'no database in the unit tests');
}
export function execute() {
  throw capabilityError('unavailable', 'no database in the unit tests');
}
export function transaction() {
  throw capabilityError('unavailable', 'no database in the unit tests');
}
