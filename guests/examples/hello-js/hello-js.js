// world: reconciler
//
// hello-js: hello-reconciler in JavaScript, plus a checkpoint in kv: every tick adds one to the
// count under "checkpoint" (a fenced write) and logs it. Built by scripts/build-js-guest.sh with
// componentize-js (guests/tools/js).
//
// Config: `greeting` (default "hello"); `fail_at_tick` = "N" throws an ordinary Error on tick N,
// which reaches the host as the error "Error: asked to fail at tick N"; `busy_at_tick` = "N"
// computes without end on tick N, to see the host stop a call by force when the term ends.
//
// WIT in JS (componentize-js): u64 is a BigInt, option<T> is T or undefined, list<u8> a
// Uint8Array, enums are their WIT names as strings; an import's `err` is thrown as an Error whose
// `payload` is the capability-error ({ tag, val }).

import { name, holder } from 'leasehold:plugin/lease@0.1.0';
import { log } from 'leasehold:plugin/log@0.1.0';
import { get, put } from 'leasehold:plugin/kv@0.1.0';

const KNOWN_KEYS = ['greeting', 'fail_at_tick', 'busy_at_tick'];
const CHECKPOINT = 'checkpoint';

let greeting = 'hello';
let failAtTick; // a BigInt, to compare with ctx.tick; undefined when not configured
let busyAtTick; // the same, for busy_at_tick

export function init(config) {
  return guarded(() => {
    greeting = 'hello';
    failAtTick = undefined;
    busyAtTick = undefined;
    for (const [key, value] of config) {
      switch (key) {
        case 'greeting':
          greeting = value;
          break;
        case 'fail_at_tick':
          if (!/^[0-9]+$/.test(value)) {
            return err(`config fail_at_tick = '${value}': expected a tick number (a non-negative integer)`);
          }
          failAtTick = BigInt(value);
          break;
        case 'busy_at_tick':
          if (!/^[0-9]+$/.test(value)) {
            return err(`config busy_at_tick = '${value}': expected a tick number (a non-negative integer)`);
          }
          busyAtTick = BigInt(value);
          break;
        default:
          // A misspelt key is an error, not a silent default.
          return err(`unknown config key '${key}' (known: ${KNOWN_KEYS.join(', ')})`);
      }
    }
    log('info', `${greeting}: starting on lease ${name()} as ${holder()}`);
  });
}

export function reconcile(ctx) {
  return guarded(() => {
    if (failAtTick !== undefined && ctx.tick === failAtTick) {
      throw new Error(`asked to fail at tick ${ctx.tick}`);
    }
    if (busyAtTick !== undefined && ctx.tick === busyAtTick) {
      for (;;) {} // stopped by the host: the call's deadline, or the end of the term
    }

    let stored;
    try {
      stored = get(CHECKPOINT);
    } catch (e) {
      return err(`checkpoint not read: ${capabilityError(e)}`);
    }
    let count = 0n;
    if (stored !== undefined) {
      const text = new TextDecoder().decode(stored);
      if (!/^[0-9]+$/.test(text)) {
        return err(`checkpoint not read: '${text}' is not a decimal count`);
      }
      count = BigInt(text);
    }
    count += 1n;

    try {
      put(CHECKPOINT, new TextEncoder().encode(count.toString()));
    } catch (e) {
      // Fenced: lease-lost means another replica may hold the lease now and nothing was written.
      if (e?.payload?.tag === 'lease-lost') {
        return err('checkpoint not saved: lease lost');
      }
      return err(`checkpoint not saved: ${capabilityError(e)}`);
    }

    log('info', `${greeting} from epoch ${ctx.epoch}, tick ${ctx.tick}: checkpoint ${count}`);
    return { requeueAfterMs: undefined }; // the manifest's interval
  });
}

// The `err` of a result<_, string> export: componentize-js turns a returned { tag: 'err' } into it.
function err(message) {
  return { tag: 'err', val: message };
}

// componentize-js turns only a thrown string (or an Error carrying a `payload`) into the `err`
// of a result; an ordinary thrown Error makes the call trap, and the host would see only
// "wasm `unreachable` instruction executed". So every export runs through here, and a thrown
// exception becomes the error "<ErrorName>: <message>".
function guarded(body) {
  try {
    return body();
  } catch (e) {
    if (e !== null && typeof e === 'object' && 'message' in e) {
      return err(`${e.name ?? 'Error'}: ${e.message}`);
    }
    return err(String(e));
  }
}

// "kind: text" (or just "kind") of a capability-error thrown by a kv or sql import.
function capabilityError(e) {
  const payload = e?.payload;
  if (payload === undefined || typeof payload.tag !== 'string') {
    throw e; // not a capability error: guarded() reports it
  }
  return payload.val === undefined ? payload.tag : `${payload.tag}: ${payload.val}`;
}
