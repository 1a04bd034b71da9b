"""Name resolution: a global name of a module to the unit that defines it, an external
import, a builtin, or nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gym_repost.construct.dependencies.index import ImportBinding, RepositoryIndex
from gym_repost.construct.dependencies.names import BUILTINS, PY2_BUILTINS


@dataclass(frozen=True)
class Resolution:
    """What a name of a module denotes.

    ``definition``: top-level units of ``module`` binding ``name``; ``module``: a
    repository module object; ``external``: ``binding``, an import from outside the
    repository; ``builtin``; ``typing``: bound only under ``if TYPE_CHECKING:``;
    ``unresolved``.
    """

    kind: Literal["definition", "module", "external", "builtin", "typing", "unresolved"]
    module: str = ""
    name: str = ""
    binding: ImportBinding | None = None


_UNRESOLVED = Resolution("unresolved")


def _module_exists(index: RepositoryIndex, name: str) -> bool:
    """A module, or a namespace package some module lives under."""
    return name in index.modules or any(m.startswith(name + ".") for m in index.modules)


def _exported(index: RepositoryIndex, module: str, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``from module import *`` binds ``name``."""
    info = index.modules.get(module)
    if info is None or module in seen:
        return False
    if info.exports is not None:
        return name in info.exports
    if name.startswith("_"):
        return False
    return name in info.bindings or any(
        s.repository and _exported(index, s.module, name, seen | {module}) for s in info.stars
    )


def resolve_name(index: RepositoryIndex, module: str, name: str, *, member: bool = False) -> Resolution:
    """What ``name`` denotes at the top level of ``module`` (``member``: as ``module.name``
    from outside, so builtins do not count and submodules do)."""
    key = (module, name + ("." if member else ""))
    if key not in index._resolved:
        index._resolved[key] = _UNRESOLVED  # an import cycle resolves to nothing
        index._resolved[key] = _resolve_uncached(index, module, name, member)
    return index._resolved[key]


def _resolve_uncached(index: RepositoryIndex, module: str, name: str, member: bool) -> Resolution:
    info = index.modules.get(module)
    if info is None:
        if member and _module_exists(index, f"{module}.{name}"):
            return Resolution("module", f"{module}.{name}")
        return _UNRESOLVED
    units = info.bindings.get(name)
    if units:
        last = units[-1]
        if not last.imports:
            return Resolution("definition", module, name)
        binding = next(b for b in last.imports if b.local == name)
        return _resolve_binding(index, binding)
    if name in info.typing_only:
        return Resolution("typing", module, name)
    for star in info.stars:
        if star.repository and _exported(index, star.module, name):
            return resolve_name(index, star.module, name, member=True)
    if member and _module_exists(index, f"{module}.{name}"):
        return Resolution("module", f"{module}.{name}")
    if not member and name in BUILTINS:
        return Resolution("builtin", name=name)
    # not defined here: assume the last star import of an outside module binds it
    external_stars = [s for s in info.stars if not s.repository]
    if external_stars:
        return Resolution("external", binding=external_stars[-1])
    if not member and name in PY2_BUILTINS:
        return Resolution("builtin", name=name)
    return _UNRESOLVED


def _resolve_binding(index: RepositoryIndex, binding: ImportBinding) -> Resolution:
    if not binding.repository:
        return Resolution("external", binding=binding)
    if not binding.module:
        return _UNRESOLVED
    if binding.attr is None:
        return Resolution("module", binding.module) if _module_exists(index, binding.module) else _UNRESOLVED
    resolution = resolve_name(index, binding.module, binding.attr, member=True)
    submodule = f"{binding.module}.{binding.attr}"
    if resolution.kind == "unresolved" and _module_exists(index, submodule):
        # ``from pkg import sub`` binds the submodule when pkg has no such attribute; also
        # in pkg/__init__.py itself, where the attribute is this very import (a cycle)
        return Resolution("module", submodule)
    return resolution


def resolve_reference(
    index: RepositoryIndex, module: str, name: str, attrs: tuple[str, ...] = ()
) -> tuple[Resolution, int]:
    """Resolve ``name.attrs...`` in ``module`` through module objects.

    Returns the resolution and how many attributes were consumed getting there (``m.f``
    with ``m`` a repository module: ``f``'s definition and 1).
    """
    resolution = resolve_name(index, module, name)
    used = 0
    while resolution.kind == "module" and used < len(attrs):
        resolution = resolve_name(index, resolution.module, attrs[used], member=True)
        used += 1
    return resolution, used
