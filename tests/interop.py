"""Wrappers that make the runtime take a particular zero-copy path in GPU tests."""


class OnlyDlpack:
    """Hides __cuda_array_interface__ so that the DLPack path is the one taken."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()
