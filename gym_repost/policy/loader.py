"""Turn a ``--policy`` string into a factory of policy objects.

Forms: ``oracle``, ``mutant``, ``scripted:FILE``, ``llm:PROVIDER/MODEL``,
``path/to/file.py:ClassName`` and ``package.module:ClassName``. The factory makes one
policy per episode; :func:`load_policy` builds one at once, so that a policy that cannot be
built (a bad option, a constructor that raises) fails before any work. A class loaded by
path or module name is a plain policy: it is given the task view, and one claiming
privilege (a :class:`~gym_repost.policy.base.PrivilegedPolicy` other than a shipped
control) is refused. :func:`policy_fingerprint` says which policy a run used (its spec,
options and the SHA-256 of its files), so that a run is not resumed with another.
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

from pydantic import BaseModel, ConfigDict, Field

from gym_repost.errors import ConfigError, GymRepostError, PolicyError
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
        """A new policy.

        Raises:
            PolicyError: its constructor raised (the message names the policy and why);
                the project's own errors (a ConfigError) pass unchanged.
        """
        try:
            policy = self.make()
        except GymRepostError:  # the project's own errors say what is wrong (a bad LLM setting)
            raise
        except Exception as exc:
            raise PolicyError(f"policy {self.spec!r} could not be created: {type(exc).__name__}: {exc}") from exc
        return policy

    def check(self) -> None:
        """Build one policy now and close it, so that one that cannot be built fails
        before a run starts rather than in every episode.

        Raises:
            PolicyError: it cannot be built.
        """
        policy = self()
        close = getattr(policy, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                raise PolicyError(f"policy {self.spec!r}: close() raised {type(exc).__name__}: {exc}") from exc


class PolicyFingerprint(BaseModel):
    """Which policy a run used: resuming a run with another is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str
    """The ``--policy`` spec."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Its constructor's options (``--policy-arg``)."""
    files: dict[str, str] = Field(default_factory=dict)
    """The SHA-256 (hex) of each file the policy is loaded from, by the path the spec gives
    (a policy file, a ``scripted:`` file, a module's source file); none for shipped policies."""

    def file_changes(self, now: PolicyFingerprint) -> list[str]:
        """What changed in the policy's files between this fingerprint and ``now``, in words."""
        changes = []
        for path in sorted(set(self.files) | set(now.files)):
            before, after = self.files.get(path), now.files.get(path)
            if before != after:
                changes.append(
                    f"the policy file {path} changed since the run started "
                    f"(SHA-256 {(before or 'none')[:12]} there, {(after or 'none')[:12]} now)"
                )
        return changes


def _policy_files(spec: str) -> list[Path]:
    """The files a spec loads the policy from (none for shipped policies or unknown forms)."""
    if spec.startswith("scripted:"):
        return [Path(spec.split(":", 1)[1])]
    target, sep, name = spec.rpartition(":")
    if not sep or not target or spec.startswith("llm:") or not name.isidentifier():
        return []
    if target.endswith(".py"):
        return [Path(target)]
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return []
    origin = found.origin if found is not None else None
    return [Path(origin)] if origin and origin.endswith(".py") else []


def policy_fingerprint(spec: str, options: dict[str, Any] | None = None) -> PolicyFingerprint:
    """The fingerprint of the policy ``spec`` names, with ``options``: the SHA-256 of each
    file it is loaded from (files that cannot be read are left out)."""
    files = {}
    for path in _policy_files(spec):
        try:
            files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue
    return PolicyFingerprint(spec=spec, options=dict(options or {}), files=files)


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


def _llm_factory(spec: str, options: dict[str, Any], check: bool) -> PolicyFactory:
    from gym_repost.policy.llm import LLMPolicy

    model = spec.removeprefix("llm:")
    factory = PolicyFactory(spec, lambda: LLMPolicy(model, **options), options, by_spec=True)
    if check:  # a bad option, a missing SDK or key fails now, not per episode
        policy = factory()
        try:
            policy.check()  # type: ignore[attr-defined]  # an LLMPolicy
        finally:
            policy.close()  # type: ignore[attr-defined]
    return factory


def load_policy_factory(spec: str, options: dict[str, Any]) -> PolicyFactory:
    """:func:`load_policy` with the options as one mapping, without building a policy now
    (how a factory is unpickled where its episodes run: the driver built one already)."""
    return _factory(spec, options, check=False)


def load_policy(spec: str, **options: Any) -> PolicyFactory:
    """A factory for the policy named by ``spec``; ``options`` go to its constructor. One
    policy is built (and closed) at once, so that one that cannot be built fails here.

    Raises:
        ConfigError: unknown form, missing file or class, or not a policy.
        PolicyError: the policy cannot be built with these options (its constructor raised).
    """
    factory = _factory(spec, options, check=True)
    if not spec.startswith("llm:"):  # an LLM policy was built and checked by _llm_factory
        factory.check()
    return factory


def _factory(spec: str, options: dict[str, Any], check: bool) -> PolicyFactory:
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
        return _llm_factory(spec, options, check)
    target, sep, name = spec.rpartition(":")
    if not sep or not name.isidentifier() or not target:
        raise ConfigError(f"unknown policy {spec!r}; use one of: {', '.join(_BUILTIN)}")
    cls = _class_from_file(target, name) if target.endswith(".py") else _class_from_module(target, name)
    _check_policy_class(cls, spec)
    return PolicyFactory(spec, lambda: cls(**options), options, by_spec=True)
