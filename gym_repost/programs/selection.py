"""Choose the test's inputs among those the search ran (standard library only).

Runs in the sandbox as ``_gym_repost_selection.py``. Greedy, in this order: inputs that reach arcs
of the target no chosen input reaches; inputs that tell mutants of the target apart from
it (each mutant is swapped into the module in turn and the candidates that execute the
mutated line are run until one changes the outcome; the mutants no candidate tells apart
are then hunted in rounds of more and more mutations of those candidates, which put the
literals of the mutated line and of the target into them, for as long as the budget
lasts); one input per outcome class
(result type or exception type); distinct results; then the repository's own (traced)
calls whose results no chosen input shows, in slots of their own. Every input is run twice more before
it is taken and dropped when its outcome changes (see ``Explorer.stable``).

Telling mutants apart spends a budget of runs of the target, not seconds; the search's
wall-clock safety limit may stop it early, and then the report says so.
"""

import ast
import contextlib
import itertools
import random

try:
    from . import mutate
except ImportError:  # in the sandbox, shipped as a top-level module
    import _gym_repost_mutate as mutate  # type: ignore[no-redef,import-not-found]

ORIGIN_RANK = {"traced": 0, "strategy": 1, "search": 2}
"""Inputs from the repository's tests first, then strategies, then the search's mutants."""
MUTANT_SLOTS = 4
"""Inputs kept free, when arcs alone would fill the test, for inputs that kill mutants."""
KILLER_SLOTS = 4
"""Inputs a test may hold beyond its size for mutants nothing else tells apart."""
TRACED_SLOTS = 8
"""Inputs a test may hold beyond its size (and its killers) for the repository's own calls
whose results no chosen input shows: the upstream suite's variety, kept."""
HUNT_ROUNDS = (12, 36, 108)
"""Mutated inputs tried against each surviving mutant, round after round, while the budget lasts."""
UNREACHED_ROUNDS = 2
"""Hunting rounds for a mutant on a line no input reaches (it may be unreachable)."""
SWEPT_INPUTS = 3
"""Inputs whose every place gets every literal of the mutated line, first in a hunt."""
MUTANT_FLOOR = 0.25
"""CPU seconds a mutant's run may take beyond ten times the slowest input's (a timer that
stops a mutant kills it: too tight a one kills mutants a busy machine only slowed)."""
SLOW_CALLS = 200_000
"""Python calls above which a run is too slow an input to be tried against mutants or
chosen for diversity (a count, not its CPU time: the same inputs on every machine)."""


class Mutants:
    """Mutants of the target (sources written by the host), swapped into the module one at a time."""

    def __init__(self, target, items, start_line):
        self.target, self.entries = target, []
        self.labels = {}  # id of a replacement -> which mutant it is (the target's ``variant``)
        for number, item in enumerate(items):
            namespace = {}
            try:
                exec(compile(item["source"], "<mutant>", "exec"), target.module.__dict__, namespace)
            except Exception:
                continue
            if target.name in namespace:
                self.entries.append((start_line + item["line"] - 1, namespace[target.name]))
                self.labels[id(namespace[target.name])] = "mutant %d" % number

    @contextlib.contextmanager
    def swapped(self, replacement):
        """The target's binding (in its module or class) replaced for the duration, and the
        target's ``variant`` naming the mutant (a run's key: see ``explore.HangGuard``)."""
        holder = self.target.owner
        name = self.target.name
        variant, self.target.variant = self.target.variant, self.labels.get(id(replacement), "mutant")
        if holder is None:
            original = self.target.module.__dict__[name]
            self.target.module.__dict__[name] = replacement
        else:
            original = vars(holder)[name]
            setattr(holder, name, replacement)
        try:
            yield
        finally:
            self.target.variant = variant
            if holder is None:
                self.target.module.__dict__[name] = original
            else:
                setattr(holder, name, original)


class Selection:
    """The test's inputs, chosen greedily; every input taken is checked for stability first."""

    def __init__(self, explorer, max_inputs, rng=None, replacements=()):
        self.explorer, self.max_inputs = explorer, max_inputs
        self.rng, self.replacements = rng or random.Random(0), list(replacements)
        self.chosen, self.covered, self.classes, self.prints = [], set(), set(), set()
        self.rejected = set()
        self.pool = sorted(explorer.trials, key=lambda t: t.rank())
        self.spend_until, self.calls_until, self.clock = float("inf"), None, None
        """The runs (and calls) counted in ``explorer.stats`` at which :meth:`by_mutants` stops."""

    @property
    def full(self):
        return len(self.chosen) >= self.max_inputs

    def take(self, trial, extra=0):
        """Choose the input when it is stable; ``extra``: inputs beyond the test's size allowed."""
        if id(trial) in self.rejected or trial in self.chosen or len(self.chosen) >= self.max_inputs + extra:
            return False
        if not self.explorer.stable(trial):
            self.rejected.add(id(trial))
            return False
        self.chosen.append(trial)
        self.covered.update(trial.arcs)
        self.classes.add(trial.kind)
        self.prints.add(trial.fingerprint)
        return True

    def by_arcs(self, limit=None):
        """Greedy set cover of the arcs the search reached (at most ``limit`` inputs in all)."""
        while not self.full and len(self.chosen) < (limit or self.max_inputs):
            best = max(
                (t for t in self.pool if id(t) not in self.rejected and t not in self.chosen),
                key=lambda t: (len(t.arcs - self.covered), -ORIGIN_RANK.get(t.origin, 3), not t.raised),
                default=None,
            )
            if best is None or not best.arcs - self.covered:
                return
            self.take(best)

    def by_mutants(self, mutants, executions, clock=None, literals=(), calls=None):
        """For each mutant, the first input (chosen ones first) whose outcome it changes;
        then the surviving mutants are hunted (:meth:`_hunt`), round after round.

        Spends at most ``executions`` runs of the target (stability checks of the inputs
        taken included) and ``calls`` Python calls in them (None: no limit); ``clock`` (a
        ``SafetyClock``) may stop it early, and records that.
        ``literals``: sources of the target's literals, put into hunted inputs.
        """
        explorer = self.explorer
        self.spend_until = explorer.stats["executed"] + executions
        self.calls_until = None if calls is None else explorer.stats["calls"] + calls
        self.clock = clock
        useful = [t for t in self.pool if t.deliberate and t not in self.chosen and not _slow(t)]
        saved = explorer.timeout
        explorer.timeout = min(saved, MUTANT_FLOOR + 10 * max([t.duration for t in self.chosen + useful] or [0.01]))
        survivors = []
        try:
            for line, replacement in mutants.entries:
                if self._killers_full() or self._spent():
                    break
                order = self._reaching(line, useful)
                with mutants.swapped(replacement):
                    killer = next((t for t in order if self._kills(t)), None)
                explorer.stats["mutants"] += 1
                if killer is None:
                    # when no input reaches the mutated line, hunt from any (first rounds only)
                    survivors.append((line, replacement, order or (self.chosen + useful)[:60], bool(order)))
                else:
                    self._killed(killer)
            for round_number, tries in enumerate(HUNT_ROUNDS):
                survivors = [
                    s
                    for s in survivors
                    if not (s[2] and (s[3] or round_number < UNREACHED_ROUNDS))
                    or not self._hunted(mutants, s[:3], tries, literals)
                ]
                if not survivors or self._killers_full() or self._spent():
                    break
            explorer.stats["mutants_surviving"] = len(survivors)
        finally:
            explorer.timeout = saved
            explorer.stats["mutant_executions"] = explorer.stats["executed"] - self.spend_until + executions

    def _reaching(self, line, useful):
        """Inputs that execute the mutated line (chosen ones first), at most 60."""
        recorder = self.explorer.recorder
        first = recorder.parser.first_line(line) if recorder else None
        reaching = (t for t in self.chosen + useful if first is None or any(first in arc for arc in t.arcs))
        return list(itertools.islice(reaching, 60))

    def _killed(self, killer):
        self.explorer.stats["mutants_killed"] += 1
        if killer not in self.chosen:
            self.take(killer, extra=KILLER_SLOTS)

    def _killers_full(self):
        return len(self.chosen) >= self.max_inputs + KILLER_SLOTS

    def _spent(self):
        """The budget of runs or of calls is spent (or the wall-clock safety limit fired)."""
        stats = self.explorer.stats
        runs = stats["executed"] >= self.spend_until
        if runs or (self.calls_until is not None and stats["calls"] >= self.calls_until):
            stats.setdefault("mutant_budget_spent", "runs" if runs else "calls")
            return True
        return self.clock is not None and self.clock.expired("mutant selection")

    def _hunted(self, mutants, survivor, tries, literals):
        """True when a hunt found an input that tells the surviving mutant apart (taken)."""
        if self._killers_full() or self._spent():
            return False
        line, replacement, order = survivor
        near = self.explorer.target.line_literals(line)
        killer = self._hunt(mutants, replacement, order, tries, near, list(literals))
        if killer is None:
            return False
        self._killed(killer)
        order.insert(0, killer)
        return True

    def _hunt(self, mutants, replacement, order, tries=HUNT_ROUNDS[0], near=(), literals=()):
        """Inputs that reach the mutated line, changed until one tells the mutant apart.

        With ``near`` (the literals bearing on the mutated line) the first tries put each
        of them in each place of the first inputs (:func:`mutate.substitutions`); then
        random mutations, half of whose literals are ``near`` ones.
        """
        explorer = self.explorer
        near = list(near)
        weighted = near * max(1, len(literals) // max(1, len(near))) + list(literals)
        # the first ``tries`` of them, made as they are taken
        swept = (
            []
            if not near
            else list(
                itertools.islice((s for t in order[:SWEPT_INPUTS] for s in mutate.substitutions(t.source, near)), tries)
            )
        )
        for attempt in range(tries):
            if self._spent():
                return None
            if attempt < len(swept):
                source = swept[attempt]
            else:
                base = self.rng.choice(order).source
                source = mutate.mutate(base, self.rng, self.replacements, literals=weighted, literal_share=0.5)
            if source is None:
                continue
            original = explorer.execute(source, "search")
            if original.error is not None or not original.deliberate or _slow(original):
                continue
            with mutants.swapped(replacement):
                if self._kills(original):
                    explorer.trials.append(original)
                    return original
        return None

    def _kills(self, trial):
        """The swapped-in mutant changes the input's outcome: another result, or a run
        stopped by its timer twice (a loaded machine may charge a fast call more CPU time
        once; a mutant that loops is stopped every time)."""
        if self._spent():
            return False
        other = self.explorer.execute(trial.source, trial.origin, seeded=trial.seeded)
        if other.error == "timeout" and not self._spent():
            other = self.explorer.execute(trial.source, trial.origin, seeded=trial.seeded)
        return other.error == "timeout" or (other.error is None and other.fingerprint != trial.fingerprint)

    def by_outcome_classes(self):
        for trial in self.pool:
            if trial.deliberate and trial.kind not in self.classes:
                self.take(trial)

    def by_traced(self):
        """The repository's own calls whose result no chosen input shows, in the tracer's
        order (round-robin over the tests that made them), up to :data:`TRACED_SLOTS` more."""
        extra = KILLER_SLOTS + TRACED_SLOTS
        for trial in self.pool:
            if len(self.chosen) >= self.max_inputs + extra:
                return
            if trial.origin == "traced" and trial.deliberate and not _slow(trial):
                if trial.fingerprint not in self.prints:
                    self.take(trial, extra=extra)

    def by_diversity(self):
        """Distinct results: first one per way of calling (arguments given), then shortest first."""
        usable = [t for t in self.pool if t.deliberate and not _slow(t)]
        shapes = set()
        for trial in sorted(usable, key=lambda t: (ORIGIN_RANK.get(t.origin, 3), t.raised, -len(t.arcs))):
            shape = _call_shape(trial.source)
            if shape not in shapes and trial.fingerprint not in self.prints and self.take(trial):
                shapes.add(shape)
        for trial in sorted(
            usable, key=lambda t: (ORIGIN_RANK.get(t.origin, 3), t.raised, -len(t.arcs), len(t.source))
        ):
            if self.full:
                return
            if trial.fingerprint not in self.prints:
                self.take(trial)


def _slow(trial):
    """The input's run made more than :data:`SLOW_CALLS` Python calls."""
    return trial.calls > SLOW_CALLS


def _call_shape(source):
    """How an input calls the target: number of positional arguments and keyword names."""
    node = ast.parse(source, mode="eval").body
    args, kwargs = node.elts[1], node.elts[2]
    keys = tuple(sorted(ast.unparse(k) for k in getattr(kwargs, "keys", []) if k is not None))
    return len(getattr(args, "elts", [])), keys


def select(
    explorer,
    max_inputs,
    mutants=None,
    mutant_executions=2000,
    clock=None,
    rng=None,
    replacements=(),
    literals=(),
    mutant_calls=None,
):
    """Choose the test's inputs: arcs, then mutants killed, outcome classes, distinct results.

    ``mutant_executions``, ``mutant_calls``: runs of the target the mutants may cost and
    Python calls in them; ``clock``: the search's wall-clock safety limit; ``literals``: the
    target's (see :meth:`Selection.by_mutants`).
    """
    selection = Selection(explorer, max_inputs, rng, replacements)
    if mutants is not None and mutants.entries:
        selection.by_arcs(max_inputs - min(MUTANT_SLOTS, len(mutants.entries)))
        selection.by_mutants(mutants, mutant_executions, clock, literals, mutant_calls)
    selection.by_arcs()
    selection.by_outcome_classes()
    selection.by_diversity()
    selection.by_traced()
    return selection.chosen
