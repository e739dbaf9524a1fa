// world: health-check
//
// {{name}}: a leasehold health check in JavaScript. The host calls `init` once per instance
// with the manifest's [config], then `check('active')` on the replica holding the lease (after
// `failure_threshold` consecutive failures it gives the lease up) and `check('standby')` on the
// others (a failing check keeps them from campaigning). This one passes unless config says
// otherwise.
//
// Config: `fail` = "never" (default), "always", "active" (only the holder's checks) or
// "standby" (only the other replicas' checks).
//
// Built with componentize-js against wit/ (./build.sh); tested natively against fakes
// (./test.sh). WIT in JavaScript: option<T> is T or undefined, enums are their WIT names as
// strings ('active', 'info').

import { holder, name } from 'leasehold:plugin/lease@0.1.0';
import { log } from 'leasehold:plugin/log@0.1.0';

const KNOWN_KEYS = ['fail'];
const FAIL_VALUES = ['never', 'always', 'active', 'standby'];

// Module state lives as long as the instance.
let fail = 'never';

export function init(config) {
  return reported(() => {
    const values = new Map(config);
    const unknown = [...values.keys()].filter((key) => !KNOWN_KEYS.includes(key));
    if (unknown.length > 0) {
      // A misspelt key is an error, not a silent default.
      const known = KNOWN_KEYS.map((k) => `"${k}"`).join(', ');
      return err(`unknown config key "${unknown[0]}" (known keys: ${known})`);
    }
    fail = values.get('fail') ?? 'never';
    if (!FAIL_VALUES.includes(fail)) {
      const allowed = FAIL_VALUES.map((v) => `"${v}"`).join(', ');
      return err(`config key "fail": "${fail}" is not one of ${allowed}`);
    }
    log('info', `checking lease "${name()}" as ${holder()} (fail = ${fail})`);
  });
}

export function check(role) {
  return reported(() => {
    // ... measure what this replica needs to do its work (a dependency, the disk, ...) ...
    if (fail === 'always' || fail === role) {
      // The text is shown in the host's /status and log.
      return err(`${role} check failed: config fail = "${fail}"`);
    }
    log('debug', `${role} check passed`);
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
