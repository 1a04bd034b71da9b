"""Script names: the names each fragment, import and shim claims in the one script, and
the renames that resolve clashes."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gym_repost.construct.dependencies.collect import Collector, Entity, Unsliceable, Use
from gym_repost.construct.dependencies.index import ImportBinding, RepositoryIndex, Unit
from gym_repost.construct.dependencies.names import BUILTINS, COMPREHENSIONS, FUNCTIONS, bound_names

TYPES_BINDING = ImportBinding("types", "types", None, "types", False)
TYPES: Entity = ("ext", "types", "types", None)


def natural_name(entity: Entity) -> str:
    return entity[2] if entity[0] == "def" else entity[1]


def _suffix(entity: Entity) -> str:
    if entity[0] == "def":
        return entity[1].split(".")[-1]
    if entity[0] == "ext":
        return (entity[2] or "ext").split(".")[-1]
    return "module"


def _binding_sites(unit: Unit, name: str, lines: list[str]) -> list[tuple[int, int, int]] | None:
    """Where a unit binds ``name`` at module level, or None when one of them cannot be
    renamed by a text edit (an import, an ``except ... as``, a match capture)."""
    sites: list[tuple[int, int, int]] = []
    stack: list[ast.AST] = [unit.node]
    while stack:
        node = stack.pop()
        if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
            if node.name == name:
                raw = lines[node.lineno - 1].encode("utf-8")
                keyword = b"class" if isinstance(node, ast.ClassDef) else b"def"
                at = raw.find(name.encode("utf-8"), raw.find(keyword, node.col_offset) + len(keyword))
                sites.append((node.lineno, at, at + len(name.encode("utf-8"))))
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            sites.append((node.lineno, node.col_offset, node.end_col_offset or node.col_offset))
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            if name in bound_names([node]) or getattr(node, "name", None) == name:
                return None
        if not isinstance(node, (ast.Lambda, *COMPREHENSIONS)):
            stack.extend(ast.iter_child_nodes(node))
    return sites


@dataclass
class Naming:
    """Script-level names: who keeps which name, shims, and the text edits that follow."""

    collector: Collector
    script: dict[Entity, str] = field(default_factory=dict)
    taken: dict[str, Entity] = field(default_factory=dict)
    shims: dict[str, Entity] = field(default_factory=dict)
    edits: dict[int, list[tuple[int, int, int, str]]] = field(default_factory=dict)
    rewritten: set[int] = field(default_factory=set)
    """Uses whose name was rewritten in its fragment (numbers in ``collector.uses``)."""
    renamed: list[tuple[Entity, str]] = field(default_factory=list)

    @property
    def index(self) -> RepositoryIndex:
        return self.collector.index

    def claim(self, name: str, entity: Entity) -> bool:
        holder = self.taken.get(name)
        if holder is not None and holder != entity:
            return False
        self.taken[name] = entity
        return True

    def run(self) -> None:
        self.protect_target()
        for use in self.collector.uses:
            if use.entity[0] != "builtin":
                continue
            if not self.claim(use.entity[1], use.entity):
                raise Unsliceable(
                    "name clash", f"{use.entity[1]} would shadow the builtin {use.unit.file}:{use.ref.line} needs"
                )
            self.script[use.entity] = use.entity[1]
        for entity in self.entities():
            if entity not in self.script:
                self.place(entity)
        for number, use in enumerate(self.collector.uses):
            if not use.in_target:
                self.serve(number, use)

    def protect_target(self) -> None:
        """The target's own name and every name its text reads keep their meaning."""
        unit = self.collector.target_unit
        own = self.collector.target.qualname.split(".")[0]
        protected = [(own, ("def", unit.module, own))]
        protected += [(u.ref.name, u.entity) for u in self.collector.uses if u.in_target]
        for local, entity in protected:
            if natural_name(entity) == "*":  # a star import binds the name itself
                self.script[entity] = "*"
                continue
            if natural_name(entity) == local:
                ok = self.claim(local, entity)
                self.script[entity] = local
            else:
                ok = self.claim(local, ("shim", local, entity))
                self.shims[local] = entity
            if not ok:
                raise Unsliceable("name clash", f"{local} of the target means two things")

    def entities(self) -> list[Entity]:
        """Every name claimant, in priority order (the target's module first)."""
        found: dict[Entity, tuple[int, int, int, str]] = {}
        target_module = self.collector.target_unit.module
        for unit in self.collector.needed.values():
            rank = self.index.modules[unit.module].rank
            for name in unit.binds:
                key = (unit.module != target_module, rank, unit.start_line, name)
                found[("def", unit.module, name)] = min(found.get(("def", unit.module, name), key), key)
        for use in self.collector.uses:
            if use.entity[0] in ("ext", "ns"):
                found.setdefault(use.entity, (True, 1 << 30, use.ref.line, natural_name(use.entity)))
        for members in self.collector.namespaces.values():
            for member in members.values():
                if member[0] == "ext":
                    found.setdefault(member, (True, 1 << 30, 0, natural_name(member)))
        if self.collector.namespaces:
            found.setdefault(TYPES, (True, 1 << 30, 0, "types"))
        return sorted(found, key=lambda e: found[e])

    def place(self, entity: Entity) -> None:
        natural = natural_name(entity)
        if natural == "*":  # from x import *: binds unknown names, claims none
            self.script[entity] = natural
            return
        if self.claim(natural, entity):
            self.script[entity] = natural
            return
        number = 1
        fresh = f"{natural}_{_suffix(entity)}"
        while fresh in self.taken or fresh in BUILTINS:
            number += 1
            fresh = f"{natural}_{_suffix(entity)}_{number}"
        if entity[0] == "def":
            self.rename_bindings(entity, fresh)
        self.claim(fresh, entity)
        self.script[entity] = fresh
        self.renamed.append((entity, fresh))

    def rename_bindings(self, entity: Entity, fresh: str) -> None:
        _, module, name = entity
        if name in self.collector.globals_declared:
            raise Unsliceable("name clash", f"{module}.{name} is assigned through a global statement")
        info = self.index.modules[module]
        for unit in info.bindings.get(name, []):
            if id(unit) not in self.collector.needed:
                continue
            sites = _binding_sites(unit, name, info.lines)
            if sites is None or unit is self.collector.target_unit:
                raise Unsliceable("name clash", f"{module}.{name} cannot be renamed ({unit.file}:{unit.start_line})")
            self.edits.setdefault(id(unit), []).extend((*site, fresh) for site in sites)

    def serve(self, number: int, use: Use) -> None:
        """Make ``use.ref.name`` denote ``use.entity`` for a fragment other than the target."""
        local, wanted = use.ref.name, self.script[use.entity]
        if wanted == "*":  # a star import binds the name (the attribute's, via a module)
            if use.through < 0:
                return
            wanted = use.ref.attrs[use.ref.attr_ends.index(use.through)]
        if use.through >= 0:
            self.rewritten.add(number)
            self.edits.setdefault(id(use.unit), []).append((use.ref.line, use.ref.col, use.through, wanted))
            return
        if local == wanted:
            return
        if self.claim(local, ("shim", local, use.entity)):
            self.shims[local] = use.entity
            return
        ref = use.ref
        self.rewritten.add(number)
        self.edits.setdefault(id(use.unit), []).append((ref.line, ref.col, ref.end_col, wanted))
