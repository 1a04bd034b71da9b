"""Stage 3, local dependencies: everything a target reaches inside its repository.

Modules: :mod:`.names` (what code reads and binds), :mod:`.index` (the repository
parsed into units), :mod:`.resolve` (a name to its unit or import), :mod:`.collect` (the
units a target reaches), :mod:`.naming` (script-level names, clashes), :mod:`.assemble`
(order, text, the slice). They may import the analysis layer and ``construct.stages`` /
``construct.extract``.

:func:`build_index` parses every module once with :mod:`ast` (never importing it) into
*units*, its top-level statements, and the import bindings of each module.
:func:`slice_dependencies` walks the target and, transitively, every unit it reaches,
resolving each global name a unit reads:

* a definition of the same module, or one reached through an import of a repository
  module (``from .x import a as b``, ``import pkg.mod as m`` then ``m.f``, re-exports
  through ``__init__`` files, star imports) -> that unit becomes a fragment;
* an import of a module outside the repository -> the import is kept (one normalised
  statement per name used);
* a builtin, or a builtin of Python 2 only (``unicode``, ``xrange``: read where only
  Python 2 runs, the script fails as the module does) -> nothing; anything else -> a drop
  (``unresolved name``). ``from pkg import sub`` binds the submodule ``pkg.sub`` when
  ``pkg`` has no such attribute, also in ``pkg/__init__.py`` itself.

Decisions worth knowing:

* **Units.** A plain top-level statement is one unit. ``if TYPE_CHECKING:`` bodies are
  left out (their names are typing-only). A ``try`` holding a repository import is
  flattened: the first of its branches (body, then each handler) whose repository
  imports all exist provides the units. An ``if`` holding a repository import stays one
  unit and cannot be sandboxed (``conditional repository import``). ``if __name__ ==
  "__main__":`` blocks are never units.
* **Mutators.** A top-level statement that mutates a needed name (``X[k] = v``,
  ``X.attr = v``, ``X.register(f)``, also inside top-level loops) comes with it.
* **Classes.** A class keeps its header, every class-level statement other than method
  definitions, its dunder methods (the interpreter calls them implicitly), its
  properties, the target, and every method whose name the kept code accesses as an
  attribute anywhere (``self.m()``, ``cls.m``, ``Class.m``, ``super().m()``,
  ``obj.m()``, ``getattr(x, "m")``): a name-based over-approximation, since the type of
  ``obj`` is not known statically. Other methods are cut from the fragment's text, except
  in classes deriving from classes outside the repository (code there may call any
  method: ``tzinfo.utcoffset``) and in slices whose code reads attributes by computed
  names (``getattr(obj, "visit_" + kind)``): those keep every method. A class deriving
  from a collection ABC (``MutableSet``, ``Sequence``, ``Mapping``...; from
  ``collections.abc`` or ``typing``) keeps the methods that ABC names: without its
  abstract ones it cannot be instantiated, and its mixins call them.
  Repository base classes are fragments ordered before their subclasses.
* **Annotations.** In a module with ``from __future__ import annotations`` they are not
  evaluated, so their names are not needed (the script keeps the future import);
  elsewhere they are walked like any definition-time expression.
* **Order.** Fragments are ordered so that every name used while the module is being
  imported (decorators, bases, default values, class bodies, constants) is defined
  before; functions may refer to later definitions. Ties follow the modules' import
  order (a module after those it imports), then line order. A cycle among definition-time
  uses drops the candidate (``import-time cycle``).
* **Shims.** A name used under another spelling (``from .x import a as b``) becomes the
  statement ``b = a``; a repository module used as ``m.f`` becomes
  ``m = types.SimpleNamespace(f=f)``. A shim some fragment needs while being imported is
  a fragment (kind ``import``) placed before that user; the others go after the
  fragments (:attr:`DependencySlice.shims`).
* **Name clashes.** Every fragment, external import and shim claims script-level names.
  When two claim the same name, the one the target's own text refers to (or else the
  earliest by module order) keeps it; the others are renamed to ``{name}_{module}``
  (``_2``, ``_3``... if taken) and the references to them rewritten, in fragments other
  than the target only. A clash the target's text is part of, a builtin shadowed for a
  fragment that needs it, or a binding that cannot be rewritten safely (an import
  inside a kept compound statement, a ``global`` statement) drops the candidate
  (``name clash``).
* **standalone** means no repository unit besides the target's own statement: for a
  method target, its class (with the methods it keeps) and nothing else.
"""

from gym_repost.construct.dependencies.assemble import slice_dependencies
from gym_repost.construct.dependencies.index import ImportBinding, ModuleInfo, RepositoryIndex, Unit, build_index
from gym_repost.construct.dependencies.names import CodeNames, Reference, bound_names, code_names
from gym_repost.construct.dependencies.resolve import Resolution, resolve_name, resolve_reference

__all__ = [
    "CodeNames",
    "ImportBinding",
    "ModuleInfo",
    "Reference",
    "RepositoryIndex",
    "Resolution",
    "Unit",
    "bound_names",
    "build_index",
    "code_names",
    "resolve_name",
    "resolve_reference",
    "slice_dependencies",
]
