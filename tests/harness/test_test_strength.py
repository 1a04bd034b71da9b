"""Tests that tell wrong code from right (issue 33): what the judge compares, and the trivial
candidates a task's tests must reject.

Each case here was a wrong candidate rewarded 1.0 before: a timezone whose repr showed only
its name (the sign of its offset dropped), a string subclass compared by its repr, the
input returned unchanged to tests whose inputs never held what the target escapes.
"""

from __future__ import annotations

import textwrap

from gym_repost.construct.quality import QualityThresholds, check_quality
from gym_repost.harness import run_function_tests
from gym_repost.harness.candidate import trivial_candidates
from gym_repost.harness.validation import validate_task
from gym_repost.sandbox.base import Sandbox
from gym_repost.task import FunctionTask
from tests.conftest import build_task

ZONE_SCRIPT = textwrap.dedent('''\
    import datetime


    class Zone(datetime.tzinfo):
        """A fixed offset; its repr shows only the name."""

        def __init__(self, name, minutes):
            self.name = name
            self.offset = datetime.timedelta(minutes=minutes)

        def utcoffset(self, dt):
            return self.offset

        def __repr__(self):
            return f"Zone({self.name!r})"


    def parse_zone(text):
        """``+HH:MM`` or ``-HH:MM`` as a Zone named after the text."""
        sign = -1 if text[0] == "-" else 1
        hours, minutes = text[1:].split(":")
        return Zone(text, sign * (60 * int(hours) + int(minutes)))


    def test_parse_zone():
        for text in ("+01:00", "-05:30", "+00:00"):
            assert repr(parse_zone(text)) == repr(parse_zone_new_implementation(text))


    if __name__ == "__main__":
        test_parse_zone()
    ''')


def _task(script: str, qualname: str) -> FunctionTask:
    return build_task(script, qualname, {"m.py": script.split("\n\ndef test_")[0]}, "m.py")


def test_an_object_is_judged_by_its_state_not_its_repr(sandbox: Sandbox) -> None:
    """The tests compare reprs (which show only the name); the host's judge compares what the
    object holds, so a candidate that drops the offset's sign is rejected."""
    task = _task(ZONE_SCRIPT, "parse_zone")
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    unsigned = task.ground_truth.replace('-1 if text[0] == "-" else 1', "1")
    assert unsigned != task.ground_truth
    report = run_function_tests(sandbox, task, unsigned)
    assert not report.passed and "return value" in report.to_text(), report.to_text()


GRAPH_SCRIPT = textwrap.dedent('''\
    class Node:
        """A level of a graph whose four edges lead to the same next level."""

        def __init__(self, level, below):
            self.level = level
            self.north = self.east = self.south = self.west = below


    def tower(height, label):
        """A graph ``height`` levels high, its top labelled: 4 ** height paths lead down it."""
        node = None
        for level in range(height):
            node = Node(level, node)
        node.label = label.upper()
        return node


    def test_tower():
        for height, label in ((40, "a"), (36, "bc")):
            assert tower(height, label).label == tower_new_implementation(height, label).label


    if __name__ == "__main__":
        test_tower()
    ''')


def test_a_returned_object_graph_is_described_within_a_bound_of_work(sandbox: Sandbox) -> None:
    """An object whose state reaches a graph walked once per path (an ORM model's session and
    mappers: RepoST-Eval 545, 718, 1028) is described up to MAX_NODES values, the same cut in
    every run: the ground truth passes at once instead of running out its CPU time, and the
    state the judge did reach still tells a wrong candidate from right."""
    task = _task(GRAPH_SCRIPT, "tower")
    report = run_function_tests(sandbox, task, task.ground_truth)
    assert report.passed, report.to_text()
    assert not run_function_tests(sandbox, task, task.ground_truth.replace("label.upper()", "label")).passed
    wrong_height = task.ground_truth.replace("range(height)", "range(height - 1)")
    assert not run_function_tests(sandbox, task, wrong_height).passed


def test_a_candidate_cannot_pass_its_object_off_as_a_librarys(sandbox: Sandbox) -> None:
    """A library's types with a repr of their own are compared by that repr; a candidate that
    labels its own class as a library's (its ``__module__``), with the repr the ground truth's
    object shows, still differs: its type's name is not the ground truth's, and a class of the
    script's own module is compared by state."""
    task = _task(ZONE_SCRIPT, "parse_zone")
    disguised = textwrap.dedent("""\
        def parse_zone(text):
            class Zone(datetime.tzinfo):
                def __init__(self, name):
                    self.name = name

                def utcoffset(self, dt):
                    return datetime.timedelta(0)

                def __repr__(self):
                    return f"Zone({self.name!r})"

            Zone.__module__ = MODULE
            return Zone(text)
        """)
    for module in ("datetime", "__main__"):
        report = run_function_tests(sandbox, task, disguised.replace("MODULE", repr(module)))
        assert not report.passed, (module, report.to_text())


SUBCLASS_SCRIPT = textwrap.dedent('''\
    class Word(str):
        """A word that knows its language."""

        def __new__(cls, text, language):
            word = super().__new__(cls, text)
            word.language = language
            return word


    def translate(text):
        """The French for a few English words."""
        known = {"cat": "chat", "dog": "chien"}
        return Word(known.get(text, text), "fr" if text in known else "en")


    def test_translate():
        for text in ("cat", "dog", "bird"):
            assert translate(text) == translate_new_implementation(text)


    if __name__ == "__main__":
        test_translate()
    ''')


def test_a_subclass_of_a_built_in_is_judged_by_its_value_and_attributes(sandbox: Sandbox) -> None:
    task = _task(SUBCLASS_SCRIPT, "translate")
    assert run_function_tests(sandbox, task, task.ground_truth).passed
    wrong_language = task.ground_truth.replace('"fr" if text in known else "en"', '"fr"')
    assert not run_function_tests(sandbox, task, wrong_language).passed  # equal as str, not as a Word


CLI_SCRIPT = textwrap.dedent('''\
    import sys
    import warnings


    def run(args):
        """Exit status of a tiny command line: errors go to standard error."""
        if not args:
            warnings.warn("no arguments: nothing to do", UserWarning)
            return 0
        try:
            return int(args[0])
        except ValueError as err:
            print("ERROR", err, file=sys.stderr)
            return 2


    def test_run():
        for args in ([], ["3"], ["x"]):
            assert run(args) == run_new_implementation(args)


    if __name__ == "__main__":
        test_run()
    ''')


def test_what_a_target_writes_to_standard_error_and_the_warnings_it_issues_are_judged(sandbox: Sandbox) -> None:
    """semver's ``main`` rewarded a candidate that no longer printed its error (to standard
    error, which the judge did not watch). A warning is compared by category and message,
    not by the line that issued it."""
    task = _task(CLI_SCRIPT, "run")
    truth = task.ground_truth
    assert run_function_tests(sandbox, task, truth).passed
    assert not run_function_tests(sandbox, task, truth.replace('print("ERROR", err, file=sys.stderr)', "pass")).passed
    assert not run_function_tests(sandbox, task, truth.replace('"ERROR"', '"EROR"')).passed
    assert not run_function_tests(sandbox, task, truth.replace("UserWarning", "DeprecationWarning")).passed
    moved = truth.replace(
        '    if not args:\n        warnings.warn("no arguments: nothing to do", UserWarning)\n        return 0\n',
        '    if args:\n        pass\n    else:\n        message = "no arguments: nothing to do"\n'
        "        warnings.warn(message, UserWarning)\n        return 0\n",
    )
    assert moved != truth and run_function_tests(sandbox, task, moved).passed  # the same warning, another line


ESCAPE_SCRIPT = textwrap.dedent('''\
    def escape(text):
        """``text`` with ``&``, ``<`` and ``>`` as HTML entities."""
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


    def test_escape():
        assert escape("plain") == escape_new_implementation("plain")
        assert escape("more plain words") == escape_new_implementation("more plain words")
        assert escape("nothing to escape") == escape_new_implementation("nothing to escape")


    if __name__ == "__main__":
        test_escape()
    ''')


def test_tests_that_accept_the_input_returned_unchanged_are_rejected(sandbox: Sandbox) -> None:
    """Inputs that never hold what the target escapes: ``return text`` passes them. Validation
    names the trivial candidate, and the quality stage drops the task."""
    task = _task(ESCAPE_SCRIPT, "escape")
    assert run_function_tests(sandbox, task, "def escape(text):\n    return text\n").passed
    validation = validate_task(sandbox, task, mutants=4)
    assert validation.passed and not validation.accepts_do_nothing
    assert validation.accepts_trivial == ["return the first argument"]
    thresholds = QualityThresholds(min_branch_coverage=0.0)
    quality = check_quality(sandbox, task, task.target.source, thresholds)
    assert quality.reason == "tests accept a trivial candidate" and "first argument" in quality.detail


def test_the_trivial_candidates_of_functions_and_methods(
    function_task: FunctionTask, method_task: FunctionTask
) -> None:
    calls = [{"rr": "3", "a": "x"}, {"rr": "3", "a": "y"}, {"rr": "[1, 2]", "a": "z"}, {"x": "builtins.KeyError"}]
    found = trivial_candidates(function_task, calls)
    assert found["return the first argument"].endswith("    return values\n")
    assert found["return the most common value"].endswith("    return 3\n")
    assert found["raise KeyError"].endswith("    raise KeyError()\n")
    assert "return self" not in found
    method = trivial_candidates(method_task)
    assert method["return self"].endswith("    return self\n")
    assert set(method) == {"return None", "return self", "return the first argument"}


FACTORY_SCRIPT = textwrap.dedent('''\
    def make_adder(k):
        """A function that adds ``k``."""
        def add(x):
            return x + k
        return add


    def test_make_adder():
        assert make_adder(1)(2) == make_adder_new_implementation(1)(2)
        assert make_adder(5)(0) == make_adder_new_implementation(5)(0)
        assert make_adder(-1)(1) == make_adder_new_implementation(-1)(1)


    if __name__ == "__main__":
        test_make_adder()
    ''')


def test_a_target_that_returns_a_function_is_dropped(sandbox: Sandbox) -> None:
    """A returned function is compared by its name only (a factory's behaviour is never
    compared in a replay): the builder drops such targets."""
    task = _task(FACTORY_SCRIPT, "make_adder")
    validation = validate_task(sandbox, task, mutants=2)
    assert validation.passed and validation.returns_callable
    quality = check_quality(sandbox, task, task.target.source, QualityThresholds(min_branch_coverage=0.0))
    assert quality.reason is not None and quality.reason.startswith("returns a function")
