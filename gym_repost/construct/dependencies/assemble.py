"""Assembly: fragments in an order where import-time uses come first, their text, the
shims, and the slice of one candidate."""

from __future__ import annotations

import ast
import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gym_repost.analysis.source import dedent_code
from gym_repost.construct.dependencies.collect import Collector, Entity, Unsliceable, Use
from gym_repost.construct.dependencies.index import ImportBinding, ModuleInfo, RepositoryIndex, Unit
from gym_repost.construct.dependencies.names import FUNCTIONS, STDLIB, target_names
from gym_repost.construct.dependencies.naming import TYPES, TYPES_BINDING, Naming, natural_name
from gym_repost.construct.extract import garbage_collector_paused
from gym_repost.construct.stages import Candidate, DependencySlice, Drop, Fragment

log = logging.getLogger(__name__)

Node = tuple[str, object]  # ("unit", id(unit)) or ("shim", name)


@dataclass(frozen=True)
class _Shim:
    name: str
    statement: str
    module: str
    line: int
    entities: tuple[Entity, ...]
    """Definitions the statement reads."""


def _namespace_text(members: dict[tuple[str, ...], Entity], script: dict[Entity, str], types_name: str) -> str:
    tree: dict[str, object] = {}
    for path, entity in sorted(members.items()):
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[path[-1]] = path[-1] if script[entity] == "*" else script[entity]

    def render(node: dict[str, object]) -> str:
        items = ", ".join(f"{k}={render(v) if isinstance(v, dict) else v}" for k, v in node.items())
        return f"{types_name}.SimpleNamespace({items})"

    return render(tree)


def _shims(naming: Naming) -> dict[str, _Shim]:
    collector, script = naming.collector, naming.script
    first: dict[str, Use] = {}
    for use in collector.uses:
        if use.through < 0:
            first.setdefault(use.ref.name if use.entity[0] != "ns" else script[use.entity], use)
    shims: dict[str, _Shim] = {}
    for local, entity in naming.shims.items():
        use = first[local]
        shims[local] = _Shim(
            local, f"{local} = {script[entity]}", use.unit.module, _import_line(collector.index, use), (entity,)
        )
    for namespace, members in collector.namespaces.items():
        name = script[namespace]
        use = first[name]
        text = _namespace_text(members, script, script[TYPES])
        shims[name] = _Shim(
            name, f"{name} = {text}", use.unit.module, _import_line(collector.index, use), tuple(members.values())
        )
    return shims


def _import_line(index: RepositoryIndex, use: Use) -> int:
    units = index.modules[use.unit.module].bindings.get(use.ref.name, [])
    return units[-1].start_line if units else use.ref.line


def _dependencies(naming: Naming, shims: dict[str, _Shim]) -> dict[Node, set[Node]]:
    """What must come before what: definition-time uses, and rebinding order."""
    collector, script = naming.collector, naming.script
    before: dict[Node, set[Node]] = {("unit", key): set() for key in collector.needed}

    def units_of(entity: Entity, user: Unit | None) -> set[Node]:
        if entity[0] != "def":
            return set()
        units = collector.index.definition_units(entity[1], entity[2])
        units = [u for u in units if id(u) in collector.needed and u is not user]
        if user is not None and user.module == entity[1]:
            earlier = [u for u in units if u.start_line < user.start_line]
            # a loop at module level reads the variable it binds itself
            units = earlier if earlier or entity[2] in user.binds else units
        return {("unit", id(u)) for u in units}

    for number, use in enumerate(collector.uses):
        if not use.ref.import_time:
            continue
        name = script.get(use.entity, "") if use.entity[0] == "ns" else use.ref.name
        via_shim = name in shims and (
            use.entity[0] == "ns" or (name != script.get(use.entity) and number not in naming.rewritten)
        )
        if via_shim:
            before[("unit", id(use.unit))].add(("shim", name))
            before.setdefault(("shim", name), set()).update(n for e in shims[name].entities for n in units_of(e, None))
        else:
            before[("unit", id(use.unit))].update(units_of(use.entity, use.unit))
    for module in {u.module for u in collector.needed.values()}:
        for units in collector.index.modules[module].bindings.values():
            chain = [u for u in units if id(u) in collector.needed and not u.imports]
            for earlier, later in zip(chain, chain[1:], strict=False):
                before[("unit", id(later))].add(("unit", id(earlier)))
    return before


def _topological(before: dict[Node, set[Node]], keys: dict[Node, tuple]) -> tuple[list[Node], list[Node]]:
    """Kahn's algorithm, the smallest key first among the nodes that are ready.

    Returns the order and the nodes left waiting on a cycle.
    """
    waiting = {node: set(deps) - {node} for node, deps in before.items()}
    users: dict[Node, list[Node]] = {}
    for node, deps in waiting.items():
        for dep in deps:
            users.setdefault(dep, []).append(node)
    ready = [(keys[n], n) for n, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for user in users.get(node, []):
            waiting[user].discard(node)
            if not waiting[user]:
                heapq.heappush(ready, (keys[user], user))
    placed = set(order)
    return order, [n for n in waiting if n not in placed]


def _cuttable(body: list[ast.stmt], member: ast.stmt, lines: list[str]) -> bool:
    """Whether a method's lines hold nothing but the method (no ``;``-joined neighbours)."""
    at = body.index(member)
    start = min([d.lineno for d in getattr(member, "decorator_list", [])] + [member.lineno])
    first = min([d.col_offset for d in getattr(member, "decorator_list", [])] + [member.col_offset])
    if lines[start - 1].encode("utf-8")[:first].strip():
        return False
    if at and (body[at - 1].end_lineno or 0) >= start:
        return False
    return at + 1 >= len(body) or body[at + 1].lineno > (member.end_lineno or 0)


def _unit_text(info: ModuleInfo, unit: Unit, edits: list[tuple[int, int, int, str]], cut: list[ast.stmt]) -> str:
    """The unit's text with ``edits`` applied and the methods in ``cut`` removed, dedented."""
    lines = info.lines[unit.start_line - 1 : unit.end_line]
    for line, col, end, new in sorted(edits, reverse=True):
        raw = lines[line - unit.start_line].encode("utf-8")
        lines[line - unit.start_line] = (raw[:col] + new.encode("utf-8") + raw[end:]).decode("utf-8")
    keep = [True] * len(lines)
    body: list[ast.stmt] = getattr(unit.node, "body", [])
    removed = [m for m in cut if _cuttable(body, m, info.lines)]
    for member in removed:
        start = min([d.lineno for d in getattr(member, "decorator_list", [])] + [member.lineno])
        for number in range(start, (member.end_lineno or start) + 1):
            keep[number - unit.start_line] = False
        number = start - 1
        while number > unit.start_line and not lines[number - unit.start_line].strip():
            keep[number - unit.start_line] = False
            number -= 1
    text_lines = [ln for ln, k in zip(lines, keep, strict=True) if k]
    if removed and len(removed) == len(body):
        first = info.lines[body[0].lineno - 1]
        text_lines.append(first[: len(first) - len(first.lstrip())] + "pass")
    text = "\n".join(text_lines)
    return dedent_code(text) if text[:1] in (" ", "\t") else text


def _fragment_text(
    index: RepositoryIndex, collector: Collector, unit: Unit, edits: list[tuple[int, int, int, str]]
) -> str:
    """A unit's text in the script (``edits`` applied, unreachable methods cut)."""
    kept = frozenset(collector.kept[id(unit)]) if isinstance(unit.node, ast.ClassDef) else None
    key = (id(unit), kept)
    if not edits and key in index._texts:
        return index._texts[key]
    cut = [] if kept is None else [d for name, defs in index.members(unit).items() if name not in kept for d in defs]
    text = _unit_text(index.modules[unit.module], unit, edits, cut)
    if not edits:
        index._texts[key] = text
    return text


def _fragment_name(unit: Unit, script: dict[Entity, str]) -> str:
    node = unit.node
    if isinstance(node, (*FUNCTIONS, ast.ClassDef)):
        natural = node.name
    elif isinstance(node, ast.Assign) and list(target_names(node.targets[0])):
        natural = next(target_names(node.targets[0]))
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        natural = node.target.id
    else:
        natural = min(unit.binds or unit.mutates or {""})
    return script.get(("def", unit.module, natural), natural)


# --------------------------------------------------------------------------- the slice


def _target_unit(index: RepositoryIndex, candidate: Candidate) -> Unit:
    info = index.files.get(candidate.file)
    if info is None:
        why = index.rejected.get(candidate.file, "another file has the same module name")
        raise Unsliceable("module not indexed", f"{candidate.file}: {why}")
    top = candidate.qualname.split(".")[0]
    for unit in info.units:
        node = unit.node
        if (
            isinstance(node, (*FUNCTIONS, ast.ClassDef))
            and node.name == top
            and unit.start_line <= candidate.start_line <= unit.end_line
        ):
            return unit
    raise Unsliceable("target not found", f"{candidate.file}: no top-level statement holds {candidate.qualname}")


@dataclass
class _Assembly:
    """The ordered fragments, shims and imports of one slice."""

    index: RepositoryIndex
    collector: Collector
    naming: Naming

    def order(self) -> tuple[list[Node], list[_Shim], dict[str, _Shim]]:
        shims = _shims(self.naming)
        before = _dependencies(self.naming, shims)
        keys: dict[Node, tuple] = {}
        for key, unit in self.collector.needed.items():
            keys[("unit", key)] = (self.index.modules[unit.module].rank, unit.start_line, 0, unit.position)
        for name, shim in shims.items():
            keys[("shim", name)] = (self.index.modules[shim.module].rank, shim.line, 1, 0)
        order, stuck = _topological(before, keys)
        if stuck:
            raise Unsliceable("import-time cycle", ", ".join(sorted(self.label(n) for n in stuck)[:6]))
        placed = {n[1] for n in order if n[0] == "shim"}
        late = sorted((s for s in shims.values() if s.name not in placed), key=lambda s: keys[("shim", s.name)])
        return order, late, shims

    def label(self, node: Node) -> str:
        if node[0] == "shim":
            return str(node[1])
        unit = self.collector.needed[node[1]]  # type: ignore[index]
        return f"{unit.file}:{unit.start_line}"

    def fragment(self, node: Node, shims: dict[str, _Shim]) -> Fragment:
        if node[0] == "shim":
            shim = shims[node[1]]  # type: ignore[index]
            file = self.index.modules[shim.module].file
            return Fragment(file, shim.module, shim.name, "import", shim.statement, shim.line, shim.line)
        unit = self.collector.needed[node[1]]  # type: ignore[index]
        text = _fragment_text(self.index, self.collector, unit, self.naming.edits.get(id(unit), []))
        return Fragment(
            unit.file,
            unit.module,
            _fragment_name(unit, self.naming.script),
            unit.kind,
            text,
            unit.start_line,
            unit.end_line,
        )

    def external_imports(self) -> list[str]:
        futures = sorted({f for u in self.collector.needed.values() for f in self.index.modules[u.module].futures})
        lines = {
            self.binding_statement(e, b)
            for e in self.naming.script
            if e[0] == "ext"
            for b in self.collector.external.get(e, {TYPES_BINDING})
        }
        ordered = sorted(lines, key=lambda s: (0 if s.startswith("import ") else 1 if s.startswith("from ") else 2, s))
        return [f"from __future__ import {f}" for f in futures] + ordered

    def binding_statement(self, entity: Entity, binding: ImportBinding) -> str:
        """The import of ``binding`` (one spelling of ``entity``), under its script name."""
        name = self.naming.script[entity]
        if binding.attr == "*" or name == binding.local:
            return binding.statement
        return ImportBinding(name, binding.module, binding.attr, binding.dotted, False).statement

    def third_party(self) -> list[str]:
        tops = {e[2].split(".")[0] for e in self.naming.script if e[0] == "ext"}
        for unit in self.collector.needed.values():
            tops.update(unit.imported)
        return sorted(t for t in tops if t not in STDLIB and t not in self.index.top_level)

    def context(self, fragments: list[Fragment]) -> str:
        """Per file: the import statements its kept code uses, then its fragments, in file order."""
        files: dict[str, tuple[list[tuple[int, str]], list[tuple[int, str]]]] = {}
        for fragment in fragments:
            files.setdefault(fragment.file, ([], []))
        for unit in self.used_imports():
            text = _fragment_text(self.index, self.collector, unit, [])
            files.setdefault(unit.file, ([], []))[0].append((unit.start_line, text))
        for unit in self.collector.needed.values():
            text = _fragment_text(self.index, self.collector, unit, [])
            files.setdefault(unit.file, ([], []))[1].append((unit.start_line, text))
        blocks = []
        for path, (imports, definitions) in files.items():
            sections = ["\n".join(text for _, text in sorted(imports))] if imports else []
            sections += [text for _, text in sorted(definitions)]
            if sections:
                blocks.append("```python\n## " + path + "\n" + "\n\n\n".join(sections) + "\n```\n")
        return "\n".join(blocks)

    def used_imports(self) -> list[Unit]:
        found: dict[int, Unit] = {}
        for use in self.collector.uses:
            units = self.index.modules[use.unit.module].bindings.get(use.ref.name, [])
            if units and units[-1].imports:
                found[id(units[-1])] = units[-1]
        return list(found.values())


def slice_dependencies(
    index: RepositoryIndex, candidate: Candidate, names: Sequence[tuple[str, str]] = ()
) -> DependencySlice | Drop:
    """Everything ``candidate`` reaches in its repository, ready to be sandboxed.

    ``names``: repository classes and functions, as ``(qualified name, module)``, that the
    script must define too, under their own names (those the traced inputs name, see
    :attr:`~gym_repost.construct.testgen.trace.RecordedCall.names`). When they cannot all
    be had (a name means something else in the script, an unresolved name in their code),
    the slice is the one without them: inputs naming them then fail to build, as before.

    Slicing many candidates is faster inside one
    :func:`~gym_repost.construct.extract.garbage_collector_paused` block (each call
    pauses the collector for itself, but a collection between calls walks the index).

    Returns:
        The slice, or a :class:`Drop` (stage ``dependencies``) saying why there is none:
        ``unresolved name``, ``module object used``, ``conditional repository import``,
        ``name clash``, ``import-time cycle``, ``module not indexed``, ``target not found``.
    """
    with garbage_collector_paused():
        if names:
            sliced = _slice(index, candidate, tuple(sorted(set(names))))
            if not isinstance(sliced, Drop):
                return sliced
        return _slice(index, candidate)


def _slice(
    index: RepositoryIndex, candidate: Candidate, names: tuple[tuple[str, str], ...] = ()
) -> DependencySlice | Drop:
    try:
        target_unit = _target_unit(index, candidate)
        collector = Collector(index, candidate, target_unit, extra=names)
        collector.run()
        naming = Naming(collector)
        naming.run()
        assembly = _Assembly(index, collector, naming)
        order, late, shims = assembly.order()
    except Unsliceable as exc:
        return Drop(candidate.file, candidate.qualname, "dependencies", exc.reason, exc.detail)
    fragments = [assembly.fragment(node, shims) for node in order]
    renamed = {(f"{e[1]}.{natural_name(e)}" if e[0] == "def" else natural_name(e)): new for e, new in naming.renamed}
    if renamed:
        log.info("%s: renamed to avoid name clashes: %s", candidate.key, renamed)
    return DependencySlice(
        target=candidate,
        fragments=fragments,
        external_imports=assembly.external_imports(),
        shims=[s.statement for s in late],
        context=assembly.context(fragments),
        standalone=len(collector.needed) == 1,
        third_party=assembly.third_party(),
        renamed=renamed,
    )
