"""Unit tests of {{module}}.py, run natively: ./test.sh (the fake host is fake_host.py)."""

import unittest

from fake_host import FakeHost, call  # first: it puts the bindings on the import path

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import types  # noqa: E402


class ReconcilerTest(unittest.TestCase):
    def test_logs_each_tick_with_its_epoch(self):
        host = FakeHost(self, epoch=7)
        call("init", [("greeting", "hi")])
        for tick in (0, 1):
            ctx = types.ReconcileContext(lease="leader", epoch=7, tick=tick)
            self.assertEqual(call("reconcile", ctx), types.Outcome(requeue_after_ms=None))
        self.assertEqual(
            host.lines(),
            [
                'starting on lease "leader" as replica-a',
                "hi from epoch 7, tick 0",
                "hi from epoch 7, tick 1",
            ],
        )

    def test_a_misspelt_config_key_fails_init(self):
        FakeHost(self)
        with self.assertRaises(Err) as failed:
            call("init", [("greting", "hi")])
        expected = 'unknown config key "greting" (known keys: "greeting")'
        self.assertEqual(failed.exception.value, expected)


if __name__ == "__main__":
    unittest.main()
