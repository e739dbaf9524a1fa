"""Unit tests of {{module}}.py, run natively: ./test.sh (the fake host is fake_host.py)."""

import unittest

from fake_host import FakeHost, call  # first: it puts the bindings on the import path

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import types  # noqa: E402


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
