"""expecttest, as far as torch's test utilities (torch.testing._internal.common_utils) need it to
import: Debian 12 packages no expecttest. No test of the distributed suite compares against an
inline expectation; one that tries is skipped, not passed."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, *args, **kwargs):  # noqa: N802 (expecttest's name)
        raise unittest.SkipTest("expecttest is not in Debian 12: no inline expectations")
