# world: health-check
"""{{name}}: a leasehold health check in Python.

The host calls `init` once per instance with the manifest's [config], then `check(ACTIVE)` on
the replica holding the lease (after `failure_threshold` consecutive failures it gives the lease
up) and `check(STANDBY)` on the others (a failing check keeps them from campaigning). This one
passes unless config says otherwise.

Config: `fail` = "never" (default), "always", "active" (only the holder's checks) or "standby"
(only the other replicas' checks).

Built with componentize-py against wit/ (./build.sh); tested natively against fakes (./test.sh).
"""

import functools
import re
from typing import List, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import lease, log, types

KNOWN_KEYS = ("fail",)
FAIL_VALUES = ("never", "always", "active", "standby")

# Module state: componentize-py makes a new WitWorld object for every call, while the module
# lives as long as the instance.
fail = "never"


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
        global fail
        values = dict(config)
        unknown = sorted(set(values) - set(KNOWN_KEYS))
        if unknown:
            # A misspelt key is an error, not a silent default.
            known = ", ".join(f'"{k}"' for k in KNOWN_KEYS)
            raise Err(f'unknown config key "{unknown[0]}" (known keys: {known})')
        fail = values.get("fail", "never")
        if fail not in FAIL_VALUES:
            allowed = ", ".join(f'"{v}"' for v in FAIL_VALUES)
            raise Err(f'config key "fail": "{fail}" is not one of {allowed}')
        message = f'checking lease "{lease.name()}" as {lease.holder()} (fail = {fail})'
        log.log(log.Level.INFO, message)

    @reported
    def check(self, role: types.Role) -> None:
        # ... measure what this replica needs to do its work (a dependency, the disk, ...) ...
        name = role.name.lower()  # "active" or "standby"
        if fail == "always" or fail == name:
            # The text is shown in the host's /status and log.
            raise Err(f'{name} check failed: config fail = "{fail}"')
        log.log(log.Level.DEBUG, f"{name} check passed")
