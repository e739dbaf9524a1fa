# world: reconciler
"""hello-python: a reconciler in Python.

Logs a greeting on every tick with the term's epoch, and keeps a checkpoint in the plugin's kv
store: a count of the ticks run under any holder, written with a fenced put, so a write from a
replica that has lost the lease is refused and changes nothing.

Config: `greeting` (default "hello"); `fail_at_tick` (optional): raise an ordinary exception on
that tick, to see a plugin's failure reach the host's /status and log; `busy_at_tick` (optional):
compute without end on that tick, to see the host stop a call by force when the term ends.

Built with componentize-py against the WIT package in wit/ (world `reconciler`):
    componentize-py -d wit -w reconciler componentize hello_python -o hello-python.wasm
"""

from typing import List, Optional, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import kv, lease, log, types

KNOWN_KEYS = ("greeting", "fail_at_tick", "busy_at_tick")
CHECKPOINT = "checkpoint"


def info(message: str) -> None:
    log.log(log.Level.INFO, message)


def failure(error: Exception) -> Err:
    """What the host shows for an exception: its class and message, as the WIT error string.

    componentize-py turns only `Err` into the function's error result; any other exception would
    trap the instance, and the host would see a trap instead of the guest's message.
    """
    return Err(f"{type(error).__name__}: {error}")


def describe(error: types.CapabilityError) -> str:
    """A host capability error in words: its case and, when it has one, its text."""
    name = type(error).__name__.removeprefix("CapabilityError_")
    value = getattr(error, "value", None)
    return f"{name}: {value}" if value is not None else name


class Settings:
    """What init read from the config. Module state, not attributes of `WitWorld`: componentize-py
    makes a new `WitWorld` object for every call, while the module lives as long as the instance,
    and the host starts a fresh instance every term."""

    greeting: str = "hello"
    fail_at_tick: Optional[int] = None
    busy_at_tick: Optional[int] = None


class WitWorld(wit_world.WitWorld):

    def init(self, config: List[Tuple[str, str]]) -> None:
        try:
            values = dict(config)
            unknown = sorted(set(values) - set(KNOWN_KEYS))
            if unknown:
                raise ValueError(
                    f"unknown config key '{unknown[0]}' (known: {', '.join(KNOWN_KEYS)})"
                )
            Settings.greeting = values.get("greeting", "hello")
            if "fail_at_tick" in values:
                Settings.fail_at_tick = int(values["fail_at_tick"])
            if "busy_at_tick" in values:
                Settings.busy_at_tick = int(values["busy_at_tick"])
            info(f"{Settings.greeting}: starting on lease {lease.name()} as {lease.holder()}")
        except Err:
            raise
        except Exception as error:
            raise failure(error)

    def reconcile(self, ctx: types.ReconcileContext) -> types.Outcome:
        try:
            if ctx.tick == Settings.fail_at_tick:
                raise RuntimeError(f"asked to fail at tick {ctx.tick}")
            if ctx.tick == Settings.busy_at_tick:
                while True:  # stopped by the host's deadline or the end of the term
                    pass
            count = bump_checkpoint()
            info(f"{Settings.greeting} from epoch {ctx.epoch}, tick {ctx.tick}: checkpoint {count}")
            return types.Outcome(requeue_after_ms=None)
        except Err:
            raise
        except Exception as error:
            raise failure(error)


def bump_checkpoint() -> int:
    """Adds one to the checkpoint; the put is fenced by the host."""
    try:
        stored = kv.get(CHECKPOINT)
        count = int(stored.decode()) + 1 if stored is not None else 1
        kv.put(CHECKPOINT, str(count).encode())
        return count
    except Err as error:
        if isinstance(error.value, types.CapabilityError_LeaseLost):
            raise Err("checkpoint not saved: lease lost")
        raise Err(f"checkpoint: {describe(error.value)}")
