"""Backends as plugins, their variants, and the registry that finds them.

A backend is a plugin module with one hook implementation:

    from euler_core.registry import Backend, Variant, hookimpl

    @hookimpl
    def nanoeuler_backends():
        return [Backend("mybackend", "what it is", [
            Variant("gelu", "fast", impl="mybackend.gelu:Fast", device="cpu", dtypes=("float32",)),
        ])]

registered under the entry-point group `nanoeuler.backends` of its distribution (the registry loads
each entry point and registers it with pluggy; one that fails to import is kept with its error, shown
by `euler backends`, instead of taking every other backend down with it):

    [project.entry-points."nanoeuler.backends"]
    mybackend = "mybackend.plugin"

The built-in backends register exactly this way. A variant's `impl` names the object ("module" or
"module:attribute") that has its `forward` and `backward`; it is imported the first time the variant
is used, so listing backends never imports numba, cupy or triton.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field

import pluggy

from .device import cuda_unavailable_reason
from .ops import OPS

PROJECT = "nanoeuler"
ENTRY_POINT_GROUP = "nanoeuler.backends"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class BackendHooks:
    """The hook specifications a backend plugin may implement."""

    @hookspec
    def nanoeuler_backends():
        """Return a list of `Backend` objects that this plugin provides."""


@dataclass
class Variant:
    """One implementation of one op.

    op           the op's name (a key of euler_core.ops.OPS)
    name         the variant's name within its backend ("rows", "flash", ...)
    impl         "module" or "module:attr": an object with forward(...) and backward(...)
    device       "cpu" or "cuda"
    dtypes       the float dtypes it accepts
    requires     modules that must be importable for it to run ("numba", "cupy", ...)
    contiguous   True when it needs C-contiguous inputs (the core checks, with a clear error)
    probe        "module:function" returning None when the variant can run here, else the reason
                 (for needs beyond an importable module; must import nothing heavy)
    description  one line: what this variant does differently
    opt_in       (fused ops) used only when the selection names it, not whenever its backend serves
                 every primitive it replaces: for a fused variant that trades speed for memory, or
                 one not yet faster than the composition
    """

    op: str
    name: str
    impl: str
    device: str = "cpu"
    dtypes: tuple[str, ...] = ("float32", "float64")
    requires: tuple[str, ...] = ()
    contiguous: bool = False
    description: str = ""
    probe: str = ""
    opt_in: bool = False
    backend: str = ""
    _loaded: object = field(default=None, repr=False, compare=False)

    @property
    def qualname(self) -> str:
        return f"{self.backend}:{self.name}"

    def unavailable_reason(self) -> str | None:
        """None when this variant can run on this machine now, else the reason it cannot."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"{module} not installed"
        if self.device == "cuda":
            reason = cuda_unavailable_reason()
            if reason:
                return reason
        if self.probe:
            module_name, _, fn = self.probe.partition(":")
            return getattr(importlib.import_module(module_name), fn)()
        return None

    def load(self):
        """The implementation object (imported on first use)."""
        if self._loaded is None:
            module_name, _, attr = self.impl.partition(":")
            try:
                obj = importlib.import_module(module_name)
                for part in filter(None, attr.split(".")):
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as e:
                raise RuntimeError(f"variant {self.qualname} of op {self.op}: cannot load {self.impl!r}: {e}") from e
            for fn in ("forward", "backward") if OPS[self.op].output else ("forward",):
                if not callable(getattr(obj, fn, None)):
                    raise RuntimeError(f"variant {self.qualname} of op {self.op}: {self.impl!r} has no {fn}()")
            self._loaded = obj
        return self._loaded


@dataclass
class Backend:
    name: str
    description: str
    variants: list[Variant]

    def __post_init__(self):
        for v in self.variants:
            v.backend = self.name
            if v.op not in OPS:
                raise ValueError(f"backend {self.name}: variant {v.name} is for unknown op {v.op!r}; "
                                 f"ops are {sorted(OPS)}")
            if v.device not in ("cpu", "cuda"):
                raise ValueError(f"backend {self.name}: variant {v.name} has unknown device {v.device!r}")

    def variants_of(self, op: str) -> list[Variant]:
        return [v for v in self.variants if v.op == op]


class Registry:
    """Every backend that plugins provide, by name."""

    def __init__(self, plugins=(), entry_points: bool = True):
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(BackendHooks)
        self.broken: dict[str, str] = {}  # entry point name -> why it could not be loaded
        if entry_points:
            self._load_entry_points()
        for plugin in plugins:
            self.pm.register(plugin)
        self.pm.check_pending()
        self.backends: dict[str, Backend] = {}
        for backends in self.pm.hook.nanoeuler_backends():
            for backend in backends:
                if backend.name in self.backends:
                    raise ValueError(f"two plugins register a backend named {backend.name!r}")
                self.backends[backend.name] = backend

    def _load_entry_points(self) -> None:
        from importlib.metadata import entry_points
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if self.pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as e:  # a broken plugin must not hide the others
                self.broken[ep.name] = f"{ep.value}: {type(e).__name__}: {e}"
                continue
            self.pm.register(plugin, name=ep.name)

    def backend(self, name: str) -> Backend:
        if name in self.broken and name not in self.backends:
            raise ValueError(f"backend {name!r} is installed but failed to load ({self.broken[name]})")
        if name not in self.backends:
            raise ValueError(f"unknown backend {name!r}; backends: {', '.join(sorted(self.backends)) or 'none'}"
                             + ("" if self.backends else " (is nanoeuler installed? pip install -e .)"))
        return self.backends[name]

    def variants(self, op: str | None = None) -> list[Variant]:
        return [v for b in self.backends.values() for v in b.variants if op is None or v.op == op]

    def find(self, qualname: str, op: str) -> Variant:
        """The variant 'backend:name' of `op`."""
        backend_name, _, variant_name = qualname.partition(":")
        backend = self.backend(backend_name)
        for v in backend.variants_of(op):
            if v.name == variant_name:
                return v
        names = [v.name for v in backend.variants_of(op)]
        raise ValueError(f"backend {backend_name} has no variant {variant_name!r} of op {op}; "
                         f"its variants of {op}: {', '.join(names) or 'none'}")


_DEFAULT: Registry | None = None


def get_registry() -> Registry:
    """The registry of every installed backend (built once per process)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Registry()
    return _DEFAULT
