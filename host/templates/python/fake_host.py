"""A fake host for the unit tests of {{module}}.py (test_{{module}}.py, run by ./test.sh).

test.sh writes the world's bindings into .bindings/ (plain Python); their host functions only
raise NotImplementedError, so each test replaces them with the fakes of a FakeHost.
"""

import importlib
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent / ".bindings"))

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import lease, log, types  # noqa: E402

# kv is imported by the reconciler worlds only: a health check's bindings have no kv module.
try:
    kv = importlib.import_module("wit_world.imports.kv")
except ImportError:
    kv = None

import {{module}}  # noqa: E402

# The host's words when a plugin uses kv without `[grants] kv = true` in its manifest.
NOT_GRANTED_KV = "kv is not granted: add [grants] kv = true to the plugin's manifest"


class FakeHost:
    """The lease, the log and (in a reconciler) the kv store as the plugin sees them, for the
    length of one test."""

    def __init__(self, test, lease_name="leader", epoch=7, holder="replica-a", kv_granted=True):
        self.lease_name = lease_name
        self.holder = holder
        self.epoch = epoch  # None: this replica does not hold the lease
        self.logs = []  # (level, message), the level in lowercase: "info"
        self.kv = {}  # the kv store (granted by [grants] kv = true): key -> bytes
        fakes = [
            (lease, "name", lambda: self.lease_name),
            (lease, "holder", lambda: self.holder),
            (lease, "epoch", lambda: self.epoch),
            (lease, "acquired_at_ms", lambda: None if self.epoch is None else 1_700_000_000_000),
            (lease, "time_left_ms", lambda: None if self.epoch is None else 10_000),
            (lease, "shard", lambda: None),
            (log, "log", lambda level, message: self.logs.append((level.name.lower(), message))),
        ]
        if kv is not None and kv_granted:
            fakes += [
                (kv, "get", lambda key: self.kv.get(key)),
                (kv, "put", lambda key, value: self.kv.__setitem__(key, bytes(value))),
                (kv, "delete", lambda key: self.kv.pop(key, None) is not None),
            ]
        elif kv is not None:
            # Without the grant the host answers every kv call with not-granted, naming the key.
            def refused(*_args):
                raise Err(types.CapabilityError_NotGranted(NOT_GRANTED_KV))

            fakes += [
                (kv, name, refused)
                for name in ("get", "put", "delete", "list", "list_")
                if hasattr(kv, name)
            ]
        for module, name, fake in fakes:
            patcher = mock.patch.object(module, name, fake)
            patcher.start()
            test.addCleanup(patcher.stop)

    def lines(self, level="info"):
        """The messages logged at `level`, in order."""
        return [message for at, message in self.logs if at == level]


def call(method, *args):
    """Calls an export as the host does: componentize-py makes a new WitWorld for every call."""
    return getattr({{module}}.WitWorld(), method)(*args)
