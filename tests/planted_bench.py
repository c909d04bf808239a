"""Planted variants for the benchmark tests (tests/test_bench*.py): one right but slow, one wrong
everywhere, one wrong only at shapes wider than the conformance cases; and, as the backend "splits" of `Splits()`,
one wrong only with the launch configuration it picks for many rows. Registered as the backend
"planted" through `Registry(plugins=[Planted()])`; `References()` registers "refs", a stand-in for an
outside reference with several variants (right and fast, right and slow, wrong). Nothing here is
used by the project itself."""

import time

from backends.naive import gelu as naive_gelu
from backends.naive._out import into
from euler_core.registry import Backend, Variant, hookimpl


class GeluSlow:
    """Right, and slow: the naive GELU plus a 2 ms nap per call."""

    @staticmethod
    def forward(inputs, attrs, out=None):
        time.sleep(2e-3)
        return naive_gelu.forward(inputs, attrs, out)

    @staticmethod
    def backward(saved, dout, grads):
        time.sleep(2e-3)
        return naive_gelu.backward(saved, dout, grads)


class GeluOff:
    """Wrong everywhere: the forward is off by 1e-3 (conformance catches it)."""

    backward = staticmethod(naive_gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = naive_gelu.forward(inputs, attrs, None)
        return into(out, y + 1e-3), saved


class GeluWideRowsWrong:
    """Wrong only for rows wider than 96 (a tile-size bug): every conformance case is narrower, so
    only the check at the benchmarked shape (C = 128) can catch it. And it is fast."""

    backward = staticmethod(naive_gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = naive_gelu.forward(inputs, attrs, None)
        y = y.copy()
        if y.shape[-1] > 96:
            y[..., 96:] = 0.0  # BUG: the second tile is never computed
        return into(out, y), saved


class GeluSplitPastRowsWrong:
    """Wrong only with the launch configuration it picks for many rows: like the triton dW's split-K
    count chosen from N, more than 1024 rows take a two-split path, which drops the last row. The
    conformance cases have at most 257 rows, and a check on 1024 rows (what the benchmark checked
    GPT-2's shapes on before it checked the very call it times) passes."""

    backward = staticmethod(naive_gelu.backward)

    @staticmethod
    def forward(inputs, attrs, out=None):
        y, saved = naive_gelu.forward(inputs, attrs, None)
        if y.shape[0] > 1024:  # the two-split configuration
            y = y.copy()
            y[-1] = 0.0  # BUG: the second split stops one row short
        return into(out, y), saved


class Splits:
    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("splits", "a variant wrong only in its many-rows configuration", [
            Variant("gelu", "past1024", impl="planted_bench:GeluSplitPastRowsWrong"),
        ])]


class Planted:
    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("planted", "bench test variants", [
            Variant("gelu", "slow", impl="planted_bench:GeluSlow"),
            Variant("gelu", "off", impl="planted_bench:GeluOff"),
            Variant("gelu", "widerows", impl="planted_bench:GeluWideRowsWrong"),
        ])]


class GeluFast:
    """Right and fast: the naive GELU itself."""

    forward = staticmethod(naive_gelu.forward)
    backward = staticmethod(naive_gelu.backward)


class References:
    @hookimpl
    def nanoeuler_backends(self):
        return [Backend("refs", "a reference backend of several variants", [
            Variant("gelu", "slow", impl="planted_bench:GeluSlow"),
            Variant("gelu", "fast", impl="planted_bench:GeluFast"),
            Variant("gelu", "off", impl="planted_bench:GeluOff"),
        ])]
