"""Inputs from strategies: value pools varied around base inputs (standard library only).

Runs in the sandbox as ``_gym_repost_strategies.py``. A base input is each of the first traced
calls and the parameters' defaults; every parameter is varied over its pool one at a
time around each base (value position first, so that every parameter gets varied early),
then random combinations follow. Methods get instances from the traced calls, from
calling the class, or from ``_gr_build`` with the attributes the body reads from self.
"""

import ast

try:
    from . import hints, mutate, pools
except ImportError:  # in the sandbox, shipped as top-level modules
    import _gym_repost_hints as hints  # type: ignore[no-redef,import-not-found]
    import _gym_repost_mutate as mutate  # type: ignore[no-redef,import-not-found]
    import _gym_repost_pools as pools  # type: ignore[no-redef,import-not-found]

OMIT = object()
"""A parameter left out of the call (its default applies)."""
MAX_SEED_BASES = 3
"""Traced calls used as bases for varying one parameter at a time."""


class Strategies:
    """Inputs from value pools: a base input, one parameter varied at a time, random mixes."""

    def __init__(self, target, builder, seeds, rng):
        self.params, self.rng = target.hints.params, rng
        self.unbuildable = {}
        self.pools = {p.name: self._choices(p, builder) for p in self.params}
        self.instances = instance_sources(target, builder, seeds) if target.needs_instance else [None]
        self.seeds = [c for c in (self.from_seed(s) for s in seeds[:MAX_SEED_BASES]) if c is not None]
        self.varied = False

    def from_seed(self, seed):
        """A traced call as a choice of values per parameter (None if it does not fit)."""
        try:
            args = ast.parse(seed["args"], mode="eval").body
            kwargs = ast.parse(seed["kwargs"], mode="eval").body
        except SyntaxError:
            return None
        values = [ast.get_source_segment(seed["args"], e) for e in getattr(args, "elts", [])]
        choice = {p.name: OMIT for p in self.params}
        for p in self.params:
            if p.kind in ("positional_only", "positional") and values:
                choice[p.name] = values.pop(0)
            elif p.kind == "var_positional":
                choice[p.name], values = values, []
        named = {
            k.value: ast.get_source_segment(seed["kwargs"], v)
            for k, v in zip(getattr(kwargs, "keys", []), getattr(kwargs, "values", []))
            if isinstance(k, ast.Constant)
        }
        for p in self.params:
            if p.name in named and p.kind not in ("var_positional", "var_keyword"):
                choice[p.name] = named.pop(p.name)
        keywords = next((p for p in self.params if p.kind == "var_keyword"), None)
        if keywords is not None and named:
            choice[keywords.name] = named
        elif named or values:
            return None
        return (choice, seed.get("instance"))

    def _choices(self, param, builder):
        try:
            values = builder.for_param(param)
        except pools.Unbuildable as exc:
            self.unbuildable[param.name] = str(exc)
            return []
        if param.kind == "var_positional":
            return [[], values[:1], values[:2], values[1:4]]
        if param.kind == "var_keyword":
            keys = [k.strip("'\"") for k in param.usage.keys if k.strip("'\"").isidentifier()] or ["key", "option"]
            return [{}, {keys[0]: values[0]}, dict(zip(keys[::-1] + ["extra"], values[1:4]))]
        return values

    def base(self):
        choice = {}
        for p in self.params:
            optional = p.default is not None or p.kind in ("var_positional", "var_keyword")
            choice[p.name] = OMIT if optional or not self.pools[p.name] else self.pools[p.name][0]
        return choice

    def inputs(self):
        """Endless input sources (None when a required parameter has no value).

        Every parameter varied over its pool one at a time around a base input: each of
        the first traced calls, then the defaults; then random combinations.
        """
        first = self.instances[0] if self.instances else None
        bases = [(c, i or first) for c, i in self.seeds] + [(self.base(), first)]
        for base, instance in bases:
            yield self.render(base, instance)
        for position in range(max((len(v) for v in self.pools.values()), default=0)):
            for p in self.params:
                if position < len(self.pools[p.name]):
                    for base, instance in bases:
                        yield self.render(dict(base, **{p.name: self.pools[p.name][position]}), instance)
        for instance in self.instances[1:]:
            yield self.render(bases[-1][0], instance)
        self.varied = True
        while True:
            yield self.render({p.name: self._random(p) for p in self.params}, self.rng.choice(self.instances or [None]))

    def _random(self, param):
        values = self.pools[param.name]
        optional = param.default is not None or param.kind in ("var_positional", "var_keyword")
        if not values or (optional and self.rng.random() < 0.4):
            return OMIT
        return values[int(len(values) * self.rng.random() ** 2)]

    def render(self, choice, instance):
        """The combined ``(instance, args, kwargs)`` source of a choice of values."""
        if self.instances and instance is None and self.instances != [None]:
            return None
        args, kwargs = self._positional(choice)
        if args is None:
            return None
        for p in self.params:
            value = choice.get(p.name, OMIT)
            if p.kind == "keyword_only" and value is not OMIT:
                kwargs.append((p.name, value))
            elif p.kind == "var_keyword" and value is not OMIT:
                taken = {name for name, _ in kwargs} | {q.name for q in self.params}
                kwargs.extend((k, v) for k, v in value.items() if k not in taken)
        if any(
            p.kind == "keyword_only" and p.default is None and choice.get(p.name, OMIT) is OMIT for p in self.params
        ):
            return None
        args_source = "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")"
        kwargs_source = "{" + ", ".join("%r: %s" % (name, value) for name, value in kwargs) + "}"
        return mutate.join_input(instance, args_source, kwargs_source)

    def _positional(self, choice):
        positional = [p for p in self.params if p.kind in ("positional_only", "positional")]
        varargs = next((p for p in self.params if p.kind == "var_positional"), None)
        extra = choice.get(varargs.name, OMIT) if varargs else OMIT
        extra = [] if extra is OMIT else extra
        last = max((i for i, p in enumerate(positional) if choice.get(p.name, OMIT) is not OMIT), default=-1)
        args, kwargs, keyword = [], [], False
        for p in positional[: last + 1]:
            value = choice.get(p.name, OMIT)
            if value is OMIT and p.default is None:
                return None, None
            if value is OMIT and (p.kind == "positional_only" or extra):
                value = p.default
            elif value is OMIT:
                keyword = True
                continue
            (kwargs.append((p.name, value)) if keyword else args.append(value))
        if any(p.default is None and choice.get(p.name, OMIT) is OMIT for p in positional[last + 1 :]):
            return None, None
        if not keyword:
            args.extend(extra)
        return args, kwargs


def instance_sources(target, builder, seeds):
    """Sources of instances for a method: traced, constructed, or built from attributes."""
    groups = [[s["instance"] for s in seeds if s.get("instance")]]
    try:
        groups.append(builder.for_class(target.owner))
    except pools.Unbuildable:
        pass
    groups.append(built_instances(target, builder))
    return pools.merge(groups, limit=24)


def built_instances(target, builder):
    """``_gr_build(Class, {...})`` sources setting the attributes the target reads from self."""
    owner = target.owner
    names = sorted(a for a in target.hints.self_attributes if a.isidentifier() and not hasattr(owner, a))
    values = {}
    for name in names:
        try:
            values[name] = builder.for_param(hints.Param(name, "positional", usage=target.hints.self_attributes[name]))
        except pools.Unbuildable:
            return []
    out = []
    for pick in range(4):
        fields = ", ".join("%r: %s" % (n, values[n][pick % len(values[n])]) for n in names)
        out.append("_gr_build(%s, {%s})" % (owner.__qualname__, fields))
    return list(dict.fromkeys(out))


def replacement_values(strategies):
    """Whole values a mutation may put in place of a node."""
    flat = [v for values in strategies.pools.values() for v in values if isinstance(v, str)]
    return pools.merge([flat, pools.ANY], limit=80)
