"""Turn a ``--policy`` string into a factory of policy objects.

Forms: ``oracle``, ``mutant``, ``scripted:FILE``, ``llm:PROVIDER/MODEL``,
``path/to/file.py:ClassName`` and ``package.module:ClassName``. The factory makes one
policy per episode. A class loaded by path or module name is a plain policy: it is given
the task view, and one claiming privilege (a
:class:`~gym_repost.policy.base.PrivilegedPolicy` other than a shipped control) is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_repost.errors import ConfigError, PolicyError
from gym_repost.policy.base import Policy
from gym_repost.policy.privileged import check_privilege

_BUILTIN = (
    "oracle",
    "mutant",
    "scripted:FILE",
    "llm:PROVIDER/MODEL",
    "path/to/file.py:ClassName",
    "package.module:ClassName",
)


@dataclass
class PolicyFactory:
    """Makes a fresh policy per episode; ``spec`` names it in run records."""

    spec: str
    make: Callable[[], Policy]
    options: dict[str, Any] = field(default_factory=dict)
    by_spec: bool = False
    """Made by :func:`load_policy` from ``spec`` and ``options``: pickled as those two and
    loaded again where it is unpickled (a Ray worker), so the policy's class and clients
    are created there and nothing live travels."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        if self.by_spec:
            return (load_policy_factory, (self.spec, self.options))
        return super().__reduce_ex__(protocol)

    def __call__(self) -> Policy:
        try:
            policy = self.make()
        except Exception as exc:
            raise PolicyError(f"policy {self.spec!r} could not be created: {type(exc).__name__}: {exc}") from exc
        return policy


def _class_from_file(path: str, name: str) -> type:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"policy file {path} not found")
    module_name = "gym_repost_user_policy_" + hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"policy file {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, name):
        raise ConfigError(f"{path} defines no {name!r}")
    return getattr(module, name)


def _class_from_module(module_name: str, name: str) -> type:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import policy module {module_name!r}: {exc}") from exc
    if not hasattr(module, name):
        raise ConfigError(f"module {module_name} defines no {name!r}")
    return getattr(module, name)


def _check_policy_class(cls: Any, spec: str) -> None:
    missing = [m for m in ("reset", "act") if not callable(getattr(cls, m, None))]
    if missing:
        raise ConfigError(
            f"{spec}: a policy needs methods reset() and act(); "
            f"{getattr(cls, '__name__', cls)!r} lacks {', '.join(missing)} "
            "(see gym_repost.policy.base.Policy)"
        )
    check_privilege(cls, spec)


def _llm_factory(spec: str, options: dict[str, Any]) -> PolicyFactory:
    from gym_repost.policy.llm import LLMPolicy

    model = spec.removeprefix("llm:")
    LLMPolicy(model, **options).check()  # a bad option, a missing SDK or key fails now, not per episode
    return PolicyFactory(spec, lambda: LLMPolicy(model, **options), options, by_spec=True)


def load_policy_factory(spec: str, options: dict[str, Any]) -> PolicyFactory:
    """:func:`load_policy` with the options as one mapping (how a factory is unpickled)."""
    return load_policy(spec, **options)


def load_policy(spec: str, **options: Any) -> PolicyFactory:
    """A factory for the policy named by ``spec``; ``options`` go to its constructor.

    Raises:
        ConfigError: unknown form, missing file or class, or not a policy.
    """
    from gym_repost.policy.mutant import MutantPolicy
    from gym_repost.policy.oracle import OraclePolicy
    from gym_repost.policy.scripted import ScriptedPolicy, read_script

    if spec == "oracle":
        return PolicyFactory(spec, lambda: OraclePolicy(**options), options, by_spec=True)
    if spec == "mutant":
        return PolicyFactory(spec, lambda: MutantPolicy(**options), options, by_spec=True)
    if spec.startswith("scripted:"):
        entries = read_script(spec.split(":", 1)[1])
        return PolicyFactory(spec, lambda: ScriptedPolicy(entries=entries, **options), options, by_spec=True)
    if spec.startswith("llm:"):
        return _llm_factory(spec, options)
    target, sep, name = spec.rpartition(":")
    if not sep or not name.isidentifier() or not target:
        raise ConfigError(f"unknown policy {spec!r}; use one of: {', '.join(_BUILTIN)}")
    cls = _class_from_file(target, name) if target.endswith(".py") else _class_from_module(target, name)
    _check_policy_class(cls, spec)
    return PolicyFactory(spec, lambda: cls(**options), options, by_spec=True)
