"""Collecting: every unit a target reaches, transitively, and how each use is linked."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import NamedTuple

from gym_repost.construct.dependencies.index import ImportBinding, RepositoryIndex, Unit
from gym_repost.construct.dependencies.names import CodeNames, Reference
from gym_repost.construct.dependencies.resolve import resolve_name, resolve_reference
from gym_repost.construct.stages import Candidate
from gym_repost.errors import BuildError

# ("def", module, name) | ("ext", local, module, attr) | ("ns", local, module) | ("builtin", name)
Entity = tuple


class Unsliceable(BuildError):
    """The target cannot be sliced; becomes a :class:`Drop` before leaving this module."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Use(NamedTuple):
    """A global name some kept code reads, and what it denotes in the script.

    ``through`` is the end column of a ``module.attr...`` chain that is rewritten to the
    definition's name in the script (outside the target), -1 for none.
    """

    unit: Unit
    ref: Reference
    entity: Entity
    in_target: bool
    through: int = -1


def _is_property(defs: list[ast.stmt]) -> bool:
    for node in defs:
        for decorator in getattr(node, "decorator_list", []):
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in ("property", "cached_property", "abstractproperty", "setter", "getter", "deleter"):
                return True
    return False


@dataclass
class Collector:
    """Finds every unit (and method) the target reaches, and every global use in them."""

    index: RepositoryIndex
    target: Candidate
    target_unit: Unit
    needed: dict[int, Unit] = field(default_factory=dict)
    kept: dict[int, set[str]] = field(default_factory=dict)
    uses: list[Use] = field(default_factory=list)
    namespaces: dict[Entity, dict[tuple[str, ...], Entity]] = field(default_factory=dict)
    attr_names: set[str] = field(default_factory=set)
    globals_declared: set[str] = field(default_factory=set)
    external: dict[Entity, set[ImportBinding]] = field(default_factory=dict)
    """The imports (as written) behind each external entity."""
    extra: tuple[tuple[str, str], ...] = ()
    """Repository names (qualified name, module) the script must define besides what the
    target reaches: the classes and functions its traced inputs name."""
    every_method: bool = False
    """Some kept code reads attributes by computed names: classes keep all their methods."""
    _by_member: dict[str, list[Unit]] = field(default_factory=dict)
    _queue: list[tuple[Unit, str | None]] = field(default_factory=list)

    def run(self) -> None:
        self.add_unit(self.target_unit)
        parts = self.target.qualname.split(".")
        if len(parts) == 2:
            self.keep(self.target_unit, parts[1])
        for qualname, module in self.extra:
            self.add_extra(qualname.split(".")[0], module)
        while self._queue:
            unit, member = self._queue.pop()
            names = self.index.unit_names(unit) if member is None else self.index.member_names(unit, member)
            self.walk(unit, names, self.index.links(unit, member))

    def add_extra(self, name: str, module: str) -> None:
        """``module.name`` is defined in the script under its own name, as if the target
        read it (a name it cannot have, because it already means something else, makes
        the slice fail: see :func:`~gym_repost.construct.dependencies.slice_dependencies`)."""
        if module not in self.index.modules:
            return
        units = tuple(self.index.definition_units(module, name))
        if not units:
            return
        line = self.target.start_line
        self.use(self.target_unit, Link(Reference(name, (), False, line, 0, 0), ("def", module, name), units))

    def add_unit(self, unit: Unit) -> None:
        if id(unit) in self.needed:
            return
        if unit.conditional_import:
            raise Unsliceable(
                "conditional repository import",
                f"{unit.file}:{unit.start_line} imports from the repository inside an if block",
            )
        self.needed[id(unit)] = unit
        self._queue.append((unit, None))
        if isinstance(unit.node, ast.ClassDef):
            self.kept[id(unit)] = set()
            keep_all = self.every_method or self.index.extends_external(unit)
            template = self.index.template_methods(unit)
            for name, defs in self.index.members(unit).items():
                self._by_member.setdefault(name, []).append(unit)
                if (
                    keep_all
                    or name in template
                    or (name.startswith("__") and name.endswith("__"))
                    or _is_property(defs)
                    or name in self.attr_names
                ):
                    self.keep(unit, name)

    def keep(self, unit: Unit, member: str) -> None:
        kept = self.kept[id(unit)]
        if member not in kept and member in self.index.members(unit):
            kept.add(member)
            self._queue.append((unit, member))

    def walk(self, unit: Unit, names: CodeNames, links: list[Link]) -> None:
        for link in links:
            self.use(unit, link)
        if names.dynamic_attributes and not self.every_method:
            # getattr(obj, computed): any method of any kept class may be read
            self.every_method = True
            for owner in [u for u in self.needed.values() if isinstance(u.node, ast.ClassDef)]:
                for member in self.index.members(owner):
                    self.keep(owner, member)
        for member in names.class_locals:
            self.keep(unit, member)
        self.globals_declared |= names.global_statements
        for attr in names.attrs - self.attr_names:
            self.attr_names.add(attr)
            for owner in self._by_member.get(attr, []):
                self.keep(owner, attr)

    def use(self, unit: Unit, link: Link) -> None:
        if link.problem is not None:
            raise Unsliceable(*link.problem)
        if link.entity is None:
            return
        for defining in link.units:
            self.add_unit(defining)
        if link.binding is not None:
            self.external.setdefault(link.entity, set()).add(link.binding)
        ref, entity, through = link.ref, link.entity, link.through
        in_target = unit is self.target_unit and self.target.start_line <= ref.line <= self.target.end_line
        if link.namespace is not None and (in_target or through < 0):
            # the target's text is never edited: it reads the module through a namespace
            self.namespaces.setdefault(link.namespace, {})[ref.attrs[: link.consumed]] = entity
            entity, through = link.namespace, -1
        self.uses.append(Use(unit, ref, entity, in_target, through))


@dataclass(frozen=True)
class Link:
    """A reference resolved once per index: what it denotes and the units that needs.

    ``entity`` is None for a typing-only name; ``problem`` (a drop's reason and detail)
    is set when the reference cannot be resolved. ``namespace`` is set when the name is
    a repository module and ``consumed`` attributes led to the definition.
    """

    ref: Reference
    entity: Entity | None = None
    units: tuple[Unit, ...] = ()
    namespace: Entity | None = None
    consumed: int = 0
    through: int = -1
    problem: tuple[str, str] | None = None
    binding: ImportBinding | None = None
    """For an external entity: the import as written (``import a.b.c`` binds ``a``)."""


def link_reference(index: RepositoryIndex, unit: Unit, ref: Reference) -> Link:
    resolution, used = resolve_reference(index, unit.module, ref.name, ref.attrs)
    dotted = ".".join((ref.name, *ref.attrs))
    kind = resolution.kind
    if kind == "typing":
        return Link(ref)
    if kind == "module":
        return Link(
            ref,
            problem=("module object used", f"{unit.file}:{ref.line}: {dotted} is a repository module used as a value"),
        )
    if kind == "unresolved":
        return Link(ref, problem=("unresolved name", f"{unit.file}:{ref.line}: {dotted}"))
    units: tuple[Unit, ...] = ()
    binding = resolution.binding
    if kind == "definition":
        entity: Entity = ("def", resolution.module, resolution.name)
        units = tuple(index.definition_units(resolution.module, resolution.name))
    elif kind == "external":
        assert binding is not None
        entity = ("ext", binding.local, binding.module, binding.attr)
    else:
        entity = ("builtin", resolution.name)
    if not used:
        return Link(ref, entity, units, binding=binding)
    namespace = ("ns", ref.name, resolve_name(index, unit.module, ref.name).module)
    return Link(ref, entity, units, namespace, used, ref.attr_ends[used - 1], binding=binding)
