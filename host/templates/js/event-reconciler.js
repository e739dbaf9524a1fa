// world: event-reconciler
//
// {{name}}: a leasehold event reconciler in JavaScript. The host starts it on the replica that
// acquires its lease (a fresh instance each term), calls `init` once with the manifest's
// [config], then `reconcile` on the schedule until the lease is lost, and, between reconciles,
// `handleEvent` for each PostgreSQL notification on the manifest's [events] channels. This one
// logs each tick with its epoch, and each event.
//
// Notifications sent while no replica listens (during a handover) are lost: let `reconcile` find
// all the work, and use events for latency.
//
// Config: `greeting` (default "hello"), the first word of each tick's log line.
//
// Built with componentize-js against wit/ (./build.sh); tested natively against fakes
// (./test.sh). WIT in JavaScript: u64 is a BigInt (ctx.epoch), option<T> is T or undefined,
// enums are their WIT names as strings ('info'); a host import's error is thrown as an Error
// whose `payload` is the capability-error ({ tag: 'lease-lost' }).

import { epoch, holder, name } from 'leasehold:plugin/lease@0.1.0';
import { log } from 'leasehold:plugin/log@0.1.0';

const KNOWN_KEYS = ['greeting'];

// Module state lives as long as the instance, which the host replaces every term.
let greeting = 'hello';

export function init(config) {
  return reported(() => {
    const values = new Map(config);
    const unknown = [...values.keys()].filter((key) => !KNOWN_KEYS.includes(key));
    if (unknown.length > 0) {
      // A misspelt key is an error, not a silent default.
      const known = KNOWN_KEYS.map((k) => `"${k}"`).join(', ');
      return err(`unknown config key "${unknown[0]}" (known keys: ${known})`);
    }
    greeting = values.get('greeting') ?? 'hello';
    log('info', `starting on lease "${name()}" as ${holder()}`);
  });
}

export function reconcile(ctx) {
  return reported(() => {
    // The epoch grows with every acquisition: pass it along with writes to other systems, so
    // that they can refuse a replica that lost the lease without knowing it yet.
    log('info', `${greeting} from epoch ${ctx.epoch}, tick ${ctx.tick}`);
    // return err('why') fails the call: the host logs it and retries with backoff.
    return { requeueAfterMs: undefined }; // again after the manifest's interval
  });
}

export function handleEvent(channel, payload) {
  return reported(() => {
    log('info', `event on ${channel} at epoch ${epoch() ?? 0}: ${JSON.stringify(payload)}`);
  });
}

// The `err` of an export's result: componentize-js turns a returned { tag: 'err' } into it.
function err(message) {
  return { tag: 'err', val: message };
}

// An ordinary thrown Error makes the call trap: the host would restart the instance and report
// only "wasm `unreachable` instruction executed". So every export runs through here, and a
// thrown exception becomes the call's error, "Name: message".
function reported(body) {
  try {
    return body();
  } catch (e) {
    return err(describe(e));
  }
}

// What a thrown value says, on one line. A host import's error carries the host's
// capability-error as `payload` ({ tag: 'not-granted', val: 'kv is not granted: add [grants]
// kv = true to the plugin's manifest' }): the host's own words are the ones to show.
// Exported for the unit tests (an export the WIT does not name is not part of the component).
export function describe(e) {
  const payload = e?.payload;
  if (typeof payload?.tag === 'string') {
    return payload.val === undefined ? payload.tag : `${payload.tag}: ${payload.val}`;
  }
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
