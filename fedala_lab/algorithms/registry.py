"""Every algorithm by name: one :class:`AlgorithmSpec` each, in one place, read by everything else.

A spec says what the config, the run store, the figures and the app need to know about an algorithm: its
config name and the papers' spelling (``label``), its colour and line style in every figure, its
hyper-parameters (declared :class:`~fedala_lab.params.Param` values: checked, defaulted, and all of them in
the run key), which modifiers it takes, and how its pieces are built (``build(setup) -> Algorithm``, usually
the :class:`~fedala_lab.algorithms.base.Algorithm` subclass itself).

A modifier (:class:`Modifier`) changes any algorithm that takes it, by a suffix of its name: ``+ala`` (ALA as
the local initialisation, ``fedprox+ala``) and ``-c`` (evaluate a fine-tuned copy, ``fedavg-c``). Aliases
name a composition: ``fedala`` is ``fedavg+ala``, labelled FedALA.

    >>> resolve("fedprox+ala").label
    'FedProx+ALA'
    >>> register_algorithm("fedavgm", FedAvgM, label="FedAvgM", params=[Param("server_beta", 0.9, ...)])

Built-in algorithms (each module's ``SPEC``) are registered when the package ``fedala_lab.algorithms`` is
imported (catalog.py), which any import of this module does first; plugins (other modules' algorithms:
plugins.py) load the first time a name is looked up.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..params import Param

STYLES = ("-", "--", "-.", ":")
ROLES = ("reference", "no-federation")  # AlgorithmSpec.role


@dataclass(frozen=True)
class Look:
    """How an algorithm is named and drawn: its label and, in every figure, its colour and line style."""

    label: str
    colour: str | None = None  # None: the next colour of matplotlib's default cycle
    line_style: str = "-"


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm. ``build(setup)`` makes its pieces for a run (an Algorithm subclass, or a function)."""

    name: str
    label: str
    build: Callable
    params: tuple[Param, ...] = ()
    colour: str | None = None
    line_style: str = "-"
    # the FedALA paper's kinds of method (its related work): "traditional", "fine-tune a global model",
    # "extra personal models", "personalised aggregation", "baseline"; free text for your own
    category: str = ""
    # modifiers it takes, by name ("ala", "finetune"); FedFomo and APPLE download many clients' models and
    # take no ALA, as in the FedALA paper
    modifiers: tuple[str, ...] = ("ala",)
    # Systems heterogeneity: the server keeps stragglers' partial work (FedProx) instead of dropping them.
    keeps_stragglers: bool = False
    # looks of its variants by suffix, where they differ from the default (e.g. FedProx+ALA in red)
    variants: dict[str, Look] = field(default_factory=dict)
    # check(cfg): refuse settings this algorithm cannot run with (raise ConfigError naming the field)
    check: Callable | None = None
    # divergence_hint(cfg) -> the most likely cause when its training diverges, or "" (FedProx: μ·lr ≥ 1)
    divergence_hint: Callable | None = None
    # its part in a comparison (ROLES), which the faces ask for instead of naming a method: "reference" (what
    # the others are compared against: FedAvg), "no-federation" (each client alone: Local); None: neither
    role: str | None = None
    # curve_note(run, label) -> a word beside its accuracy curve in the run's numbers, or "" (pFedMe's: scored on
    # personal models); straggler_note(cfg) -> why it gains from stragglers' partial work (FedProx's μ); notes.py
    curve_note: Callable | None = None
    straggler_note: Callable | None = None
    # whether its runs keep per-client records of the tracked clients (branching must then keep them too)
    tracks_clients: bool = False
    # whether round t depends on the earlier rounds only, never on the run's total ``cfg.rounds``: then the
    # store continues a shorter run of the same config into a longer one. False: every length computed anew.
    horizon_free: bool = True
    # its communication per client and round in the FedALA paper's notation (its Table 3): Σ a model, α_f the
    # share of the feature extractor, M the client models downloaded
    communication: str = "Σ"
    doc: str = ""
    builtin: bool = False
    # one of the methods the FedALA paper compares (its Table 2): the figures' tables and the app list them
    fedala_paper: bool = False


@dataclass(frozen=True)
class Modifier:
    """A change to any algorithm that takes it, named by a suffix (``+ala``): ``wrap(algorithm, setup)``."""

    name: str
    suffix: str
    label_suffix: str
    wrap: Callable
    params: tuple[Param, ...] = ()
    # the look of a variant from its base's, where the base does not say (AlgorithmSpec.variants)
    look: Callable[[Look], Look] = lambda base: base
    # through which round a run of the modified algorithm equals its base's run (0: none): ALA is off in
    # round 1 and until ala_after, so a stored FedAvg run is FedALA's first rounds (experiments/prefix.py)
    base_through: Callable | None = None
    tracks_clients: bool = False
    curve_note: Callable | None = None  # as AlgorithmSpec's, for every algorithm it modifies (-c: a tuned copy)


@dataclass(frozen=True)
class Resolved:
    """An algorithm name resolved: its base spec and modifiers, its look and every hyper-parameter it uses."""

    name: str
    base: AlgorithmSpec
    modifiers: tuple[Modifier, ...]
    look: Look

    @property
    def label(self) -> str:
        return self.look.label

    @property
    def params(self) -> tuple[Param, ...]:
        return self.base.params + tuple(p for m in self.modifiers for p in m.params)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def uses(self, modifier: str) -> bool:
        """Whether the modifier named ``modifier`` ("ala", "finetune") is part of this algorithm."""
        return any(m.name == modifier for m in self.modifiers)

    def without(self, modifier: str) -> str:
        """The name of this algorithm without ``modifier`` (``fedala`` → ``fedavg``)."""
        return self.base.name + "".join(m.suffix for m in self.modifiers if m.name != modifier)

    @property
    def keeps_stragglers(self) -> bool:
        return self.base.keeps_stragglers

    @property
    def tracks_clients(self) -> bool:
        return self.base.tracks_clients or any(m.tracks_clients for m in self.modifiers)

    @property
    def horizon_free(self) -> bool:
        return self.base.horizon_free

    def check(self, cfg) -> None:
        if self.base.check is not None:
            self.base.check(cfg)

    def divergence_hint(self, cfg) -> str:
        return self.base.divergence_hint(cfg) if self.base.divergence_hint is not None else ""

    @property
    def curve_note(self) -> Callable | None:
        """The note beside its curve: the last modifier's that has one (FedAvg-C's), else its base's."""
        return next((m.curve_note for m in reversed(self.modifiers) if m.curve_note), self.base.curve_note)

    def build(self, setup):
        """The pieces for one run: the base algorithm, wrapped by each modifier in turn. A registered algorithm's
        own code (a plugin's) is guarded: an exception it raises is a HookError naming it and the hook."""
        if self.base.builtin:
            algo = self.base.build(setup)
        else:
            from .guard import build_guarded

            algo = build_guarded(self.base.build, setup, label=self.base.label, algo=self.name)
        for m in self.modifiers:
            algo = m.wrap(algo, setup)
        return algo


# ----------------------------------------------------------------------------------------- the registry


def _plugins() -> None:
    """Load the installed plugins and ``$FEDALA_LAB_PLUGINS`` once per process (plugins.py)."""
    from . import plugins

    plugins.autoload()


_LOCK = threading.RLock()
_SPECS: dict[str, AlgorithmSpec] = {}
_MODIFIERS: dict[str, Modifier] = {}
_ALIASES: dict[str, tuple[str, Look]] = {}  # alias -> (name it stands for, its look)
_PARAMS: dict[str, tuple[Param, str]] = {}  # hyper-parameter name -> (declaration, who declared it)
_RESERVED: set[str] = set()  # names taken by the configs' own fields


def reserve(names: Iterable[str]) -> None:
    """Names a hyper-parameter may not take (the configs' own fields); config.py reserves its fields."""
    _RESERVED.update(names)


def _check_declarations(params: Sequence[Param], owner: str) -> None:
    """Refuse ``owner``'s hyper-parameters before anything is registered: each a Param, named once, not a config
    field, not clashing with another owner's declaration of that name, its default allowed."""
    seen = set()
    for p in params:
        if not isinstance(p, Param):
            raise ConfigError("params", p, f"Param(...) declarations (in {owner}'s registration)")
        if p.name in seen:
            raise ConfigError("params", p.name, f"each hyper-parameter declared once; {owner}'s registration "
                              f"declares {p.name!r} twice")
        seen.add(p.name)
        if p.name in _RESERVED:
            raise ConfigError("params", p.name, f"a name that is not already a config field ({owner}'s hyper-"
                              f"parameter {p.name!r} is already a config field; choose another name)")
        have = _PARAMS.get(p.name)
        if have is not None and have[1] != owner and (have[0].default, have[0].allowed) != (p.default, p.allowed):
            raise ConfigError("params", p.name, f"a name not declared otherwise ({owner}: hyper-parameter "
                              f"{p.name!r} is declared by {have[1]} with default {have[0].default!r} "
                              f"({have[0].allowed.text}); reuse that declaration or choose another name)")
        p.check(p.default)  # a default must itself be allowed


def _declare(params: Sequence[Param], owner: str) -> None:
    """Record ``owner``'s hyper-parameters (checked by :func:`_check_declarations` first)."""
    for p in params:
        _PARAMS.setdefault(p.name, (p, owner))


def _forget(owner: str) -> None:
    """Drop ``owner``'s declarations; a name another registered algorithm also declares stays declared, by it."""
    for k in [k for k, (_, who) in _PARAMS.items() if who == owner]:
        del _PARAMS[k]
        other = next(((p, s.name) for s in _SPECS.values() if s.name != owner for p in s.params if p.name == k),
                     None) or next(((p, m.suffix) for m in _MODIFIERS.values() for p in m.params if p.name == k),
                                   None)
        if other is not None:
            _PARAMS[k] = other


def make_spec(name: str, build: Callable, *, label: str | None = None, params: Sequence[Param] = (),
              modifiers: Sequence[str] = ("ala",), variants: dict[str, Look] | None = None,
              **settings) -> AlgorithmSpec:
    """An :class:`AlgorithmSpec` from :func:`register_algorithm`'s arguments (its other fields by name), not yet
    registered."""
    # ASCII only: a name with a Cyrillic "е" prints as "fedavg" and would be another algorithm
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_-]+", name):
        raise ConfigError("name", name, "lower-case ASCII letters a-z, digits, '_' and '-' (algorithm name)")
    if not callable(build):
        raise ConfigError("build", build, "an Algorithm subclass or a function(setup) -> Algorithm")
    fields = [f.name for f in dataclasses.fields(AlgorithmSpec)]
    for key, value in settings.items():
        if key not in fields:
            raise ConfigError(key, value, "no such setting: an algorithm's are " + ", ".join(fields[1:]))
        if key in ("check", "divergence_hint", "curve_note", "straggler_note") and not (value is None or callable(value)):
            raise ConfigError(key, value, "a function (or None)")
    if settings.get("role") not in (None, *ROLES):
        raise ConfigError("role", settings["role"], f"one of {', '.join(ROLES)}, or None")
    return AlgorithmSpec(name=name, label=label or name, build=build, params=tuple(params),
                         modifiers=tuple(modifiers), variants=dict(variants or {}), **settings)


def register_algorithm(name: str, build: Callable, **settings) -> AlgorithmSpec:
    """Register an algorithm under ``name`` (lower case letters, digits, ``_``, ``-``); returns its spec.

    ``build(setup)`` makes its pieces for one run: an :class:`~fedala_lab.algorithms.base.Algorithm` subclass
    (overriding the hooks it changes) or a function returning one. Keyword settings: ``label`` (the papers'
    spelling), ``params`` (its hyper-parameters as :class:`~fedala_lab.params.Param` declarations; a config then
    takes them like any setting — ``RunConfig(algo=name, server_beta=0.5)``, ``--set server_beta=0.5`` —,
    checks them, and puts all of them in the run key), ``colour`` and ``line_style`` (in every figure),
    ``modifiers`` (which apply: ``"ala"`` makes ``name+ala``; default ("ala",)), ``category``,
    ``keeps_stragglers``, ``check(cfg)``, ``divergence_hint(cfg)``, ``role`` (``"reference"``: the method the
    others are compared against; ``"no-federation"``), ``curve_note(run, label)`` and ``straggler_note(cfg)`` (its
    words beside its curve and with stragglers), ``tracks_clients``, ``horizon_free``
    (default True: round t never reads the run's total ``cfg.rounds``; say False if yours does, and the store
    never continues a shorter run of it into a longer one), ``communication``
    (the paper's notation of its traffic per client and round), ``doc``. See
    docs/extending.md. Registering a name again from the same module (a notebook cell run twice, a module
    reloaded) or from ``__main__`` replaces the earlier registration; another module's registration of a name is
    refused (two plugins would otherwise decide by their order), as is a built-in name."""
    return register_spec(make_spec(name, build, **settings))


def register_spec(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Register a spec made by :func:`make_spec` (the built-ins are registered so, in catalog.py's order)."""
    name = spec.name
    with _LOCK:
        old = _SPECS.get(name)
        if old is not None and old.builtin:
            raise ConfigError("name", name, "a name that is not a built-in algorithm's; register yours under "
                              "another name")
        mods = [getattr(s.build, "__module__", None) or "?" for s in (old, spec) if s is not None]
        if len(mods) == 2 and mods[0] != mods[1] and "__main__" not in mods:  # two plugins: neither silently wins
            raise ConfigError("name", name, f"a name no other module registers: {mods[0]} registered {name!r} "
                              f"already, {mods[1]} registers it again; rename one of them")
        if name in _ALIASES or any(name.endswith(m.suffix) for m in _MODIFIERS.values()):
            raise ConfigError("name", name, f"a name that is not an alias and does not end in a modifier's suffix "
                              f"({', '.join(_suffixes())})")
        unknown = [m for m in spec.modifiers if m not in _MODIFIERS]
        if unknown:
            raise ConfigError("modifiers", unknown, f"known modifiers: {sorted(_MODIFIERS)}")
        # everything checked before anything changes: a refused registration leaves the earlier one whole
        _check_declarations(spec.params, name)
        if old is not None:
            _forget(name)
        _declare(spec.params, name)
        _SPECS[name] = spec
        return spec


def register_modifier(modifier: Modifier) -> Modifier:
    """Register a modifier (the built-ins: ``+ala``, ``-c``)."""
    with _LOCK:
        _check_declarations(modifier.params, modifier.suffix)
        _declare(modifier.params, modifier.suffix)
        _MODIFIERS[modifier.name] = modifier
    return modifier


def register_alias(alias: str, name: str, look: Look) -> None:
    """``alias`` names the algorithm ``name`` (a base with modifiers), with its own look (``fedala``)."""
    with _LOCK:
        _parse(name)
        _ALIASES[alias] = (name, look)


def _suffixes() -> list[str]:
    return [m.suffix for m in _MODIFIERS.values()]


def _parse(name: str) -> tuple[AlgorithmSpec, tuple[Modifier, ...]]:
    """(base spec, modifiers in the order they wrap) of a composed name, or ValueError."""
    rest, mods = name, []
    while True:
        hit = next((m for m in _MODIFIERS.values() if rest.endswith(m.suffix) and len(rest) > len(m.suffix)), None)
        if hit is None:
            break
        mods.insert(0, hit)
        rest = rest[: -len(hit.suffix)]
    spec = _SPECS.get(rest)
    if spec is None:
        raise ValueError(f"no algorithm named {rest!r}")
    seen = set()
    for m in mods:
        if m.name not in spec.modifiers:
            raise ValueError(f"{spec.label} takes no {m.suffix}")
        if m.name in seen:
            raise ValueError(f"{m.suffix} twice")
        seen.add(m.name)
    return spec, tuple(mods)


def resolve(name: str) -> Resolved:
    """The algorithm called ``name`` (a registered name, an alias, or a base with modifier suffixes); a
    :class:`ConfigError` naming ``algo`` and the known names otherwise."""
    if not isinstance(name, str):
        raise ConfigError("algo", name, "one of " + ", ".join(names()))
    _plugins()
    with _LOCK:
        target, look = _ALIASES.get(name, (name, None))
        try:
            spec, mods = _parse(target)
        except ValueError as err:
            from .plugins import env_problem

            hint = "; ".join(h for h in (str(err), env_problem()) if h)
            raise ConfigError("algo", name, "one of " + ", ".join(names()), hint) from None
    if look is None:
        look = Look(spec.label, spec.colour, spec.line_style)
        for m in mods:
            look = spec.variants.get(m.suffix) or m.look(dataclasses.replace(look, label=look.label + m.label_suffix))
    return Resolved(name, spec, mods, look)


def names() -> list[str]:
    """Every algorithm name a config takes: each base, the aliases after the base they stand on, and each
    base with each modifier it takes."""
    _plugins()
    with _LOCK:
        out = []
        for spec in _SPECS.values():
            out.append(spec.name)
            out.extend(a for a, (target, _) in _ALIASES.items() if _parse(target)[0] is spec)
        for spec in _SPECS.values():
            for m in spec.modifiers:
                n = spec.name + _MODIFIERS[m].suffix
                if n not in out:
                    out.append(n)
        return out


def alias_for(name: str) -> str:
    """The alias that names the composed algorithm ``name`` (``fedavg+ala`` → ``fedala``), else ``name``."""
    with _LOCK:
        return next((a for a, (target, _) in _ALIASES.items() if target == name), name)


def aliases() -> dict[str, str]:
    """Every alias and the composed name it stands for (``{"fedala": "fedavg+ala"}``)."""
    with _LOCK:
        return {a: target for a, (target, _) in _ALIASES.items()}


def specs() -> list[AlgorithmSpec]:
    """The registered algorithms (bases), in order of registration."""
    _plugins()
    return list(_SPECS.values())


def with_role(*roles: str) -> list[str]:
    """The names of the algorithms whose spec plays one of ``roles`` (``with_role("reference")``: FedAvg)."""
    return [s.name for s in specs() if s.role in roles]


def modifier(name: str) -> Modifier | None:
    """The modifier called ``name`` ("ala", "finetune"), or None."""
    return _MODIFIERS.get(name)


def param(name: str) -> Param | None:
    """The declaration of the hyper-parameter ``name`` (by whichever algorithm or modifier declared it)."""
    hit = _PARAMS.get(name)
    return hit[0] if hit else None


def owner(name: str) -> str:
    """Who declares the hyper-parameter ``name``, as people call it: an algorithm's label ("FedProx") or a
    modifier's ("ALA"); "" for an unknown name."""
    hit = _PARAMS.get(name)
    if hit is None:
        return ""
    who = hit[1]
    if who in _SPECS:
        return _SPECS[who].label
    mod = next((m for m in _MODIFIERS.values() if m.suffix == who), None)
    return mod.label_suffix.lstrip("+-") if mod is not None else who


def param_names() -> list[str]:
    """Every declared hyper-parameter name, sorted."""
    return sorted(_PARAMS)


def catalogue() -> list[dict]:
    """Every registered algorithm as a row: name, label, category, the modified names it takes (``+ala``…),
    its hyper-parameters with their defaults, and its source (``fedala-lab methods`` prints them)."""
    rows = []
    for spec in specs():
        rows.append({"name": spec.name, "label": spec.label, "category": spec.category or "your own",
                     "variants": [spec.name + _MODIFIERS[m].suffix for m in spec.modifiers],
                     "params": {p.name: p.default for p in spec.params}, "source": spec.doc})
    for row in rows:
        row["aliases"] = [a for a, t in aliases().items() if _parse(t)[0].name == row["name"]]
    return rows


def look(name: str, i: int = 0) -> Look:
    """The label, colour and line style of the algorithm ``name``; for a name not registered (a legend
    label, an old run's algorithm): that name, the i-th colour of the default cycle."""
    try:
        lk = resolve(name).look
    except ConfigError:
        return Look(name, f"C{i % 10}", "-")
    return lk if lk.colour else dataclasses.replace(lk, colour=f"C{i % 10}")


def label(name: str) -> str:
    """The papers' spelling of an algorithm name (``fedala`` → ``FedALA``); unknown names as they are."""
    return look(name).label


__all__ = [
    "AlgorithmSpec",
    "Look",
    "Modifier",
    "Resolved",
    "alias_for",
    "aliases",
    "label",
    "look",
    "make_spec",
    "modifier",
    "names",
    "owner",
    "param",
    "param_names",
    "register_algorithm",
    "register_alias",
    "register_modifier",
    "register_spec",
    "reserve",
    "resolve",
    "specs",
    "with_role",
]
