"""Code and test samplers: the offline stand-ins, and the registry that picks one by spec.

The deterministic samplers need no model. They stand in for one so that every pipeline
runs offline (and in tests) with data of the right shape:

* :class:`MutantCodeSampler` "writes code": the ground truth, seeded mutants of it and a
  candidate that does nothing, shuffled. Some samples are right, most are wrong in a
  small way, one is wrong everywhere.
* :class:`SplitAssertTestSampler` "writes tests": the task's own assertions split into
  separate tests, plus copies with a wrong expectation. Most tests are right, some are
  wrong, so filtering and minimax selection have something to reject.

A spec string picks a sampler: ``kind`` or ``kind:argument``. Two kinds are shipped:
``deterministic`` (the offline stand-ins above) and ``llm:PROVIDER/MODEL``
(:mod:`gym_repost.data.llm_samplers`, a chat model through :mod:`gym_repost.llm`). A
factory is called as ``factory(argument, **settings)``; ``settings`` are the model's
settings from the command line (``base_url``, ``temperature``, ``cache_dir``...), and a
kind that runs no model rejects them. Another backend registers its kind here, importing
its heavy dependencies inside the factory so that ``import gym_repost`` stays light::

    def _my_code_sampler(argument: str, **settings: Any) -> CodeSampler:
        from my_package.samplers import MyCodeSampler   # the backend's module
        return MyCodeSampler(argument, **settings)

    register_code_sampler("mine", _my_code_sampler)    # --sampler mine:ARG

An LLM code sampler renders :func:`gym_repost.data.records.instruction_prompt` and reads
the reply with :func:`gym_repost.harness.extract_code_block`; an LLM test sampler renders
:func:`gym_repost.data.assertions.propose_tests_prompt` and reads the reply with
:func:`gym_repost.data.assertions.parse_test_reply` (``assert`` style).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gym_repost.analysis.mutation import generate_mutants, sample_mutants
from gym_repost.data.assertions import perturb_test, split_task_tests, under_test_names
from gym_repost.data.base import CodeSampler, TestSampler, TestSuite
from gym_repost.errors import ConfigError
from gym_repost.harness import do_nothing_candidate
from gym_repost.task import FunctionTask


class MutantCodeSampler:
    """Offline stand-in for a code model: ground truth, seeded mutants, a do-nothing.

    Args:
        include_ground_truth: put the task's ground truth among the samples.
        include_do_nothing: put a candidate whose body is ``return None`` among them.

    ``sample_code`` returns at most ``n`` codes (fewer when the ground truth has few
    mutants), in an order shuffled with the seed.
    """

    def __init__(self, include_ground_truth: bool = True, include_do_nothing: bool = True) -> None:
        self.include_ground_truth = include_ground_truth
        self.include_do_nothing = include_do_nothing
        self.name = "mutants"

    def sample_code(self, task: FunctionTask, n: int, *, seed: int) -> list[str]:
        """Up to ``n`` codes: the extras first in the pool, then mutants, shuffled."""
        extras = ([task.ground_truth] if self.include_ground_truth else []) + (
            [do_nothing_candidate(task)] if self.include_do_nothing else []
        )
        extras = extras[:n]
        mutants = sample_mutants(generate_mutants(task.ground_truth), n - len(extras), seed)
        codes = extras + [m.source for m in mutants]
        random.Random(seed).shuffle(codes)
        return codes


class SplitAssertTestSampler:
    """Offline stand-in for a test model: the task's assertions, some made wrong.

    Args:
        perturbed_share: share of the ``n`` tests that are perturbed copies with a wrong
            expectation (:func:`~gym_repost.data.assertions.perturb_test`), when there
            are enough of both kinds; the rest are the task's own tests.

    Tests are labelled ``task``, ``docstring`` or ``perturbed``.
    """

    def __init__(self, perturbed_share: float = 0.25) -> None:
        if not 0.0 <= perturbed_share <= 1.0:
            raise ConfigError(f"perturbed_share must be within [0, 1], not {perturbed_share}")
        self.perturbed_share = perturbed_share
        self.name = "split-asserts"

    def sample_tests(self, task: FunctionTask, n: int, *, seed: int) -> TestSuite:
        """Up to ``n`` tests, shuffled with the seed."""
        base = split_task_tests(task)
        rng = random.Random(seed)
        names = under_test_names(task.target, base.style)
        wrong = [rng.choice(options) for t in base.tests if (options := perturb_test(t, names))]
        k_wrong = min(len(wrong), round(n * self.perturbed_share))
        k_right = min(len(base), n - k_wrong)
        k_wrong = min(len(wrong), n - k_right)
        right = rng.sample(range(len(base)), k_right)
        picked = [(base.tests[i], base.labels[i]) for i in right]
        picked += [(t, "perturbed") for t in rng.sample(wrong, k_wrong)]
        rng.shuffle(picked)
        return TestSuite(tuple(t for t, _ in picked), base.style, tuple(label for _, label in picked))


_Sampler = TypeVar("_Sampler")

CodeSamplerFactory = Callable[..., CodeSampler]
"""Builds a code sampler: ``factory(argument, **settings)``, the argument being what
follows ``kind:`` (empty when there is none)."""
TestSamplerFactory = Callable[..., TestSampler]
"""Builds a test sampler: ``factory(argument, **settings)``."""


def _no_argument(kind: str, argument: str) -> None:
    if argument:
        raise ConfigError(f"sampler {kind!r} takes no argument (got {kind}:{argument})")


def _no_settings(kind: str, settings: dict[str, Any]) -> None:
    if settings:
        raise ConfigError(
            f"sampler {kind!r} runs no model, so {', '.join(sorted(settings))} does not apply "
            "(--base-url and --temperature are for llm:PROVIDER/MODEL samplers)"
        )


def _deterministic_code(argument: str, **settings: Any) -> CodeSampler:
    _no_argument("deterministic", argument)
    _no_settings("deterministic", settings)
    return MutantCodeSampler()


def _deterministic_tests(argument: str, **settings: Any) -> TestSampler:
    _no_argument("deterministic", argument)
    _no_settings("deterministic", settings)
    return SplitAssertTestSampler()


def _llm_model(argument: str) -> str:
    if not argument:
        raise ConfigError("sampler 'llm' needs a model: llm:PROVIDER/MODEL (e.g. llm:openai/gpt-4o-mini)")
    return argument


def _llm_code(argument: str, **settings: Any) -> CodeSampler:
    from gym_repost.data.llm_samplers import LLMCodeSampler

    return LLMCodeSampler(_llm_model(argument), **settings)


def _llm_tests(argument: str, **settings: Any) -> TestSampler:
    from gym_repost.data.llm_samplers import LLMTestSampler

    return LLMTestSampler(_llm_model(argument), **settings)


_CODE_SAMPLERS: dict[str, CodeSamplerFactory] = {"deterministic": _deterministic_code, "llm": _llm_code}
_TEST_SAMPLERS: dict[str, TestSamplerFactory] = {"deterministic": _deterministic_tests, "llm": _llm_tests}


def register_code_sampler(kind: str, factory: CodeSamplerFactory) -> None:
    """Make ``--sampler KIND[:ARG]`` build a code sampler with ``factory(ARG, **settings)``."""
    _CODE_SAMPLERS[kind] = factory


def register_test_sampler(kind: str, factory: TestSamplerFactory) -> None:
    """Make ``--test-sampler KIND[:ARG]`` build a test sampler with ``factory(ARG, **settings)``."""
    _TEST_SAMPLERS[kind] = factory


def _lookup(
    spec: str, registry: Mapping[str, Callable[..., _Sampler]], what: str, settings: dict[str, Any]
) -> _Sampler:
    kind, _, argument = spec.partition(":")
    factory = registry.get(kind)
    if factory is None:
        raise ConfigError(
            f"unknown {what} sampler {spec!r}; known kinds: {', '.join(sorted(registry))} "
            "(other backends register a kind in gym_repost.data.samplers)"
        )
    return factory(argument, **settings)


def load_code_sampler(spec: str, **settings: Any) -> CodeSampler:
    """The code sampler named by ``spec`` (``deterministic``, ``llm:PROVIDER/MODEL``, or a
    registered ``kind:arg``).

    Args:
        spec: the sampler's spec.
        **settings: the model's settings (``base_url``, ``temperature``, ``cache_dir``...);
            none for a sampler that runs no model.

    Raises:
        ConfigError: unknown kind, a bad argument or setting, a missing API key.
        MissingExtraError: the model's SDK is not installed.
    """
    return _lookup(spec, _CODE_SAMPLERS, "code", settings)


def load_test_sampler(spec: str, **settings: Any) -> TestSampler:
    """The test sampler named by ``spec``; see :func:`load_code_sampler`.

    Raises:
        ConfigError: unknown kind, a bad argument or setting, a missing API key.
        MissingExtraError: the model's SDK is not installed.
    """
    return _lookup(spec, _TEST_SAMPLERS, "test", settings)


def check_sampler_specs(
    code_specs: Sequence[str], test_specs: Sequence[str], settings: Mapping[str, Mapping[str, Any]]
) -> None:
    """Load (and close) each sampler once here, so that a bad spec, setting or missing key
    fails before any unit of work runs; the units make their own where they run.

    Raises:
        ConfigError, MissingExtraError: as :func:`load_code_sampler`.
    """
    from gym_repost.data.llm_samplers import close_samplers

    made: list[Any] = []
    try:
        made += [load_code_sampler(spec, **settings.get(spec, {})) for spec in code_specs]
        made += [load_test_sampler(spec, **settings.get(spec, {})) for spec in test_specs]
    finally:
        close_samplers(made)
