"""Unit tests of {{module}}.py, run natively: ./test.sh (the fake host is fake_host.py)."""

import unittest

from fake_host import NOT_GRANTED_KV, FakeHost, call  # first: it puts the bindings on the import path

import {{module}}  # noqa: E402

from componentize_py_types import Err  # noqa: E402
from wit_world.imports import kv, types  # noqa: E402


class EventReconcilerTest(unittest.TestCase):
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

    def test_logs_each_event(self):
        host = FakeHost(self, epoch=7)
        call("init", [])
        call("handle_event", "jobs", "job 42 queued")
        self.assertEqual(host.lines()[-1], 'event on jobs at epoch 7: "job 42 queued"')

    def test_a_misspelt_config_key_fails_init(self):
        FakeHost(self)
        with self.assertRaises(Err) as failed:
            call("init", [("greting", "hi")])
        expected = 'unknown config key "greting" (known keys: "greeting")'
        self.assertEqual(failed.exception.value, expected)

    def test_a_host_error_becomes_the_calls_error_in_the_hosts_words(self):
        # Passed on as it is, the host's error object would trap the instance (the WIT error is
        # a string): the plugin's error must be one line naming what to add to the manifest.
        FakeHost(self, kv_granted=False)
        with self.assertRaises(Err) as failed:
            {{module}}.reported(lambda: kv.get("checkpoint"))()
        self.assertEqual(failed.exception.value, f"not-granted: {NOT_GRANTED_KV}")


if __name__ == "__main__":
    unittest.main()
