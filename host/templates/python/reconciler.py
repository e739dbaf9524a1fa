# world: reconciler
"""{{name}}: a leasehold reconciler in Python.

The host starts it on the replica that acquires its lease (a fresh instance each term), calls
`init` once with the manifest's [config], then `reconcile` on the schedule until the lease is
lost. This one logs each tick with its epoch.

Config: `greeting` (default "hello"), the first word of each tick's log line.

Built with componentize-py against wit/ (./build.sh); tested natively against fakes (./test.sh).
"""

import functools
import re
from typing import List, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import lease, log, types

KNOWN_KEYS = ("greeting",)

# Module state: componentize-py makes a new WitWorld object for every call, while the module
# lives as long as the instance, which the host replaces every term.
greeting = "hello"


def info(message: str) -> None:
    log.log(log.Level.INFO, message)


def reported(export):
    """Makes any exception the call's error result, one line of text: "ClassName: message",
    or the host's own words for an error a host import raised ("not-granted: kv is not
    granted: add [grants] kv = true to the plugin's manifest").

    componentize-py turns only an `Err` holding a string into the WIT error. Any other
    exception, or the `Err` of a host import passed on as it is (it holds the host's error
    object, not a string), traps the instance: the host would restart it and show a runtime
    panic instead of the plugin's own message.
    """

    @functools.wraps(export)
    def call(*args, **kwargs):
        try:
            return export(*args, **kwargs)
        except Err as error:
            if isinstance(error.value, str):
                raise
            raise Err(host_error(error.value)) from error
        except Exception as error:
            raise Err(f"{type(error).__name__}: {error}") from error

    return call


def host_error(error) -> str:
    """A host import's error in the WIT's words: its case ("not-granted", "lease-lost", ...)
    and, when it has one, the host's text."""
    case = type(error).__name__.split("_", 1)[-1]
    case = re.sub(r"(?<!^)(?=[A-Z])", "-", case).lower()
    value = getattr(error, "value", None)
    return f"{case}: {value}" if value is not None else case


class WitWorld(wit_world.WitWorld):
    @reported
    def init(self, config: List[Tuple[str, str]]) -> None:
        global greeting
        values = dict(config)
        unknown = sorted(set(values) - set(KNOWN_KEYS))
        if unknown:
            # A misspelt key is an error, not a silent default.
            known = ", ".join(f'"{k}"' for k in KNOWN_KEYS)
            raise Err(f'unknown config key "{unknown[0]}" (known keys: {known})')
        greeting = values.get("greeting", "hello")
        info(f'starting on lease "{lease.name()}" as {lease.holder()}')

    @reported
    def reconcile(self, ctx: types.ReconcileContext) -> types.Outcome:
        # The epoch grows with every acquisition: pass it along with writes to other systems,
        # so that they can refuse a replica that lost the lease without knowing it yet.
        info(f"{greeting} from epoch {ctx.epoch}, tick {ctx.tick}")
        # Raising Err("why") fails the call: the host logs it and retries with backoff.
        return types.Outcome(requeue_after_ms=None)  # again after the manifest's interval
