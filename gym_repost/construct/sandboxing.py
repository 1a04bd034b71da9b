"""Stage 4, sandboxing: one standalone module from a dependency slice.

The module holds, in this order: a header comment saying where it comes from, the
``from __future__`` imports, the external imports (one statement per name used, in a
stable order), the repository fragments in dependency order (each under a ``# from
path:line`` comment; repository imports are gone, their names being defined in the
module), then the shims. Nothing is executed here: the module is only parsed and
compiled; the execution stage runs it in the sandbox.

The deterministic builder mocks nothing: targets that need the outside world were
dropped by extraction's keyword filters.
"""

from __future__ import annotations

import logging

from gym_repost.analysis.parsing import parse_python
from gym_repost.analysis.source import dedent_code, find_function, function_source
from gym_repost.construct.stages import DependencySlice, Drop, SandboxedScript
from gym_repost.tools import MAX_ARG_CHARS

log = logging.getLogger(__name__)


def _header(slice_: DependencySlice) -> list[str]:
    target = slice_.target
    files = sorted({f.file for f in slice_.fragments})
    return [
        f"# Sandboxed module for {target.file}::{target.qualname} (module {target.module}), assembled by",
        "# gym-repost from the repository's own code: the fragments below are copied from",
        f"# {', '.join(files)} in dependency order,",
        "# with the repository's imports resolved inside this file.",
    ]


def assemble_module(slice_: DependencySlice) -> str:
    """The text of the standalone module for a slice (not checked; see :func:`sandbox_script`)."""
    futures = [line for line in slice_.external_imports if line.startswith("from __future__ ")]
    imports = [line for line in slice_.external_imports if line not in futures]
    parts = ["\n".join(_header(slice_) + [""] + futures) if futures else "\n".join(_header(slice_))]
    if imports:
        parts.append("\n".join(imports))
    for fragment in slice_.fragments:
        parts.append(f"# from {fragment.file}:{fragment.start_line}\n{fragment.source.rstrip()}")
    if slice_.shims:
        parts.append("# names the fragments use under another spelling\n" + "\n".join(slice_.shims))
    return "\n\n\n".join(parts) + "\n"


def _target_intact(module: str, slice_: DependencySlice) -> str | None:
    """Why the target's text in ``module`` differs from the original (None: it does not)."""
    target = slice_.target
    span = find_function(module, target.qualname)
    if span is None:
        return f"the module does not define {target.qualname}"
    if function_source(module, span) != dedent_code(target.source):
        return f"the text of {target.qualname} differs from the original"
    return None


def sandbox_script(slice_: DependencySlice) -> SandboxedScript | Drop:
    """Assemble the standalone module of a slice and check it.

    Checks: the module is no longer than a tool's text argument may be (``write_script``
    takes it: wcwidth's, with its Unicode tables, is 470,077 characters), it parses and
    compiles, and the target's text in it is the original's, byte for byte (for a method,
    inside its class).

    Returns:
        The module, or a :class:`Drop` (stage ``sandboxing``) with reason ``script too
        long``, ``script does not compile`` or ``target altered``.
    """
    target = slice_.target
    module = assemble_module(slice_)
    if len(module) > MAX_ARG_CHARS:
        detail = f"{len(module):,} characters; a build's write_script takes at most {MAX_ARG_CHARS:,}"
        return Drop(target.file, target.qualname, "sandboxing", "script too long", detail)
    try:
        parse_python(module)
        compile(module, f"<sandboxed {target.key}>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, SyntaxError) else str(exc)
        return Drop(target.file, target.qualname, "sandboxing", "script does not compile", where)
    problem = _target_intact(module, slice_)
    if problem is not None:
        return Drop(target.file, target.qualname, "sandboxing", "target altered", problem)
    log.debug("sandboxed %s: %d fragments, %d lines", target.key, len(slice_.fragments), module.count("\n"))
    return SandboxedScript(target=target, module=module)
