"""HcclStream: operations issued on one return at once and complete in issue order."""
import ctypes

from ._lib import lib
from .types import Result, check


class Stream:
    """An HcclStream. Buffers of the operations issued on it stay referenced until
    synchronize() (or a query() that finds everything done) returns."""

    def __init__(self):
        self.handle = ctypes.c_void_p()
        check(lib.HcclStreamCreate(ctypes.byref(self.handle)), "HcclStreamCreate")
        self._held = []

    def hold(self, *objs):
        """Keeps objs (buffers of ops on this stream) alive until synchronize()."""
        self._held.extend(objs)

    def synchronize(self):
        """Waits for every operation issued so far; raises HcclError with the first error."""
        rc = lib.HcclStreamSynchronize(self.handle)
        self._held.clear()
        check(rc, "HcclStreamSynchronize")

    def query(self):
        """True when every operation issued is complete (raises HcclError for a failed one)."""
        rc = lib.HcclStreamQuery(self.handle)
        if rc == Result.E_AGAIN:
            return False
        self._held.clear()
        check(rc, "HcclStreamQuery")
        return True

    def destroy(self):
        """HcclStreamDestroy (also on `with` exit)."""
        if self.handle:
            lib.HcclStreamDestroy(self.handle)
            self.handle = ctypes.c_void_p()
            self._held.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # pylint: disable=broad-except
            pass
