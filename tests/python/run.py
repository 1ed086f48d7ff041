"""Runs the Python suites (unittest) and ends with the summary tests/run.sh adds up:
"python: Checks: N, Failures: F, Errors: E" (one check per test method)."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
print(f"python: Checks: {result.testsRun}, Failures: {len(result.failures)}, "
      f"Errors: {len(result.errors)}")
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
