"""Unit tests of {{module}}.py, run natively: ./test.sh

test.sh writes the world's bindings into .bindings/ (plain Python); their host functions only
raise NotImplementedError, so each test replaces them with the fakes of a FakeHost.
"""

import sys
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent / ".bindings"))

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import lease, log, types  # noqa: E402

import {{module}}  # noqa: E402


class FakeHost:
    """The lease, the log as the plugin sees them, for the length of one test."""

    def __init__(self, test, lease_name="leader", epoch=7, holder="replica-a"):
        self.lease_name = lease_name
        self.holder = holder
        self.epoch = epoch  # None: this replica does not hold the lease
        self.logs = []  # (level, message), the level in lowercase: "info"
        fakes = [
            (lease, "name", lambda: self.lease_name),
            (lease, "holder", lambda: self.holder),
            (lease, "epoch", lambda: self.epoch),
            (lease, "acquired_at_ms", lambda: None if self.epoch is None else 1_700_000_000_000),
            (lease, "time_left_ms", lambda: None if self.epoch is None else 10_000),
            (lease, "shard", lambda: None),
            (log, "log", lambda level, message: self.logs.append((level.name.lower(), message))),
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


class HealthCheckTest(unittest.TestCase):
    def test_passes_by_default(self):
        host = FakeHost(self)
        call("init", [])
        self.assertIsNone(call("check", types.Role.ACTIVE))
        self.assertIsNone(call("check", types.Role.STANDBY))
        self.assertEqual(host.lines(), ['checking lease "leader" as replica-a (fail = never)'])
        self.assertEqual(host.lines("debug"), ["active check passed", "standby check passed"])

    def test_fails_the_role_config_names(self):
        FakeHost(self)
        call("init", [("fail", "active")])
        with self.assertRaises(Err) as failed:
            call("check", types.Role.ACTIVE)
        self.assertEqual(failed.exception.value, 'active check failed: config fail = "active"')
        self.assertIsNone(call("check", types.Role.STANDBY))

    def test_a_value_out_of_the_list_fails_init(self):
        FakeHost(self)
        with self.assertRaises(Err) as failed:
            call("init", [("fail", "sometimes")])
        self.assertIn("sometimes", failed.exception.value)


if __name__ == "__main__":
    unittest.main()
