"""Stage 5 of the construction pipeline: equivalence tests without an LLM.

Inputs come from three places: the repository's own tests, run once under a tracer that
records the arguments they pass to each target (:func:`trace_repository`); strategies
inferred from annotations, defaults, usage in the body and its constants; and a
coverage-guided search that keeps inputs reaching new arcs of the target
(:func:`generate_tests`, in the sandbox). The chosen inputs become ``test_{name}()``,
comparing the original and ``{name}_new_implementation`` by outcome: return value or
exception, printed output, and the state of the arguments and of ``self`` after the call.
"""

from gym_repost.construct.testgen.explore import generate_tests
from gym_repost.construct.testgen.trace import RecordedCall, TraceResult, trace_repository, trace_with_installs
from gym_repost.construct.testgen.writer import ChosenInput, write_tests

__all__ = [
    "RecordedCall",
    "ChosenInput",
    "TraceResult",
    "generate_tests",
    "trace_repository",
    "trace_with_installs",
    "write_tests",
]
