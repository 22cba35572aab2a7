"""What fix modules declare and what the engine reports: targets, rows, fixes, verdicts.

A fix is a table. Each line is one target with its numerical reason, either a hand-written
:class:`Target` (where the maths differ: feature_patches, feature_descriptors's normalisation) or a row
of one of four kinds whose replacement the engine generates from the original's signature
(:mod:`kornia_halfpatch._codegen`):

* :class:`Promote`: a kornia function or method (``forward``) computed in float32 for half
  inputs: half tensor arguments widened, the original called, outputs narrowed once (or kept in
  float32 where the row says so).
* :class:`PromoteForKornia`: the same for a torch op, for kornia's calls only (module views; see
  ``_kornia_scope``), optionally on one device type.
* :class:`WidenDtypes`: a kornia dtype validator whose accepted list gains float16/bfloat16
  wherever it accepts float32; every other dtype still gets kornia's own error.
* :class:`EditSource`: a kornia function recompiled from the release's own source with a few
  lines edited (a network's own float32 tensor made to follow its half dtype).

This module imports neither torch nor kornia (the pytest plugin imports the package).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _environment as environment
from . import _options as options_manifest

# Where a replacement goes. "everywhere": on its home module or class, plus every kornia alias
# (the default). "kornia": kornia's code only, through aliases and module views.
SCOPE_EVERYWHERE = "everywhere"
SCOPE_KORNIA = "kornia"


class Verdict(enum.Enum):
    """What a probe or gate found, and what the engine decided for a fix or one of its targets.

    A probe (or a target's gate) answers NEEDED or NOT_NEEDED; the engine records APPLIED only
    once the replacement is installed."""

    APPLIED = "applied"  # installed
    NEEDED = "needed"  # the probe (or a target's gate) found the bug: the fix goes in
    NOT_NEEDED = "not needed"  # the behaviour probe found no bug
    UNSUPPORTED = "unsupported"  # the target has another shape, or computes differently
    ABSENT = "absent"  # the target does not exist in this release
    OFF = "turned off"  # by the user (selection, kill switch)
    UPSTREAM = "fixed upstream"  # kornia >= the release that has the fix
    FAILED = "failed"  # the probe, build or install raised; skipped, rolled back
    PENDING = "pending"  # deferred until kornia is imported; or kornia not installed


@dataclass(frozen=True)
class Finding:
    """A probe's answer: the verdict and the sentence that says why."""

    verdict: Verdict
    reason: str

    @property
    def needed(self) -> bool:
        return self.verdict is Verdict.NEEDED


def bug_present(reason: str = "bug present") -> Finding:
    return Finding(Verdict.NEEDED, reason)


def not_needed(detail: str) -> Finding:
    return Finding(Verdict.NOT_NEEDED, f"not needed: {detail}")


def unsupported(detail: str) -> Finding:
    return Finding(Verdict.UNSUPPORTED, f"unsupported: {detail}")


@dataclass(frozen=True)
class Target:
    """One attribute to replace, built by hand.

    ``candidates`` are ``"module:attribute.path"`` strings tried in order; the first that
    resolves is used (``"kornia.geometry.grid:create_meshgrid"`` on 0.8.3,
    ``"kornia.utils.grid:create_meshgrid"`` before). ``build(original)`` returns the replacement.
    ``expects_parameters`` is the shape check: the original's leading parameter names must equal
    it. ``scope`` is ``SCOPE_EVERYWHERE`` or ``SCOPE_KORNIA`` (module-level functions only), or a
    callable returning one, asked at install time (after ``Fix.configure``). ``reason`` is the
    numerical reason shown for the row. Example calls for the contract battery live with the
    tests (tests/examples.py, by ``label``).
    """

    candidates: Tuple[str, ...]
    build: Callable[[Any], Any]
    expects_parameters: Optional[Tuple[str, ...]] = None
    optional: bool = False
    scope: Union[str, Callable[[], str]] = SCOPE_EVERYWHERE
    reason: str = ""
    row: Optional["Row"] = None  # the table row this target was expanded from
    # Whether this one target is needed on the installed torch, asked once the fix's probe found
    # the bug (a Finding; NEEDED or NOT_NEEDED): a row standing in for a missing half CPU kernel
    # (kernel_gate) is left out where the kernel exists.
    gate: Optional[Callable[[], "Finding"]] = None
    # Whether the resolved original has the shape this target's replacement is built from, beyond
    # its parameters: a sentence saying what differs, or None. A target whose check fails is left
    # out alone (unsupported on this release); the fix's other targets still go in.
    check: Optional[Callable[[Any], Optional[str]]] = None

    @property
    def label(self) -> str:
        return self.candidates[0].split(":")[-1]


def kernel_gate(kernels: Tuple[str, ...], half: Tuple[str, ...] = ("float16", "bfloat16")) -> Callable[[], "Finding"]:
    """A target's gate: needed where the installed torch lacks a half CPU kernel (for one of the
    ``half`` dtypes) for one of ``kernels`` (names in :data:`kornia_halfpatch._kernels.KERNELS`)."""

    def gate() -> Finding:
        from ._kernels import describe

        needed, reason = describe(kernels, half)
        return Finding(Verdict.NEEDED if needed else Verdict.NOT_NEEDED, reason)

    gate.kernels = kernels  # type: ignore[attr-defined]  # what the gate asks about, for reports and tests
    return gate


def _candidates(value: Union[str, Tuple[str, ...]]) -> Tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@dataclass(frozen=True)
class Promote:
    """Row: a kornia function or method computed in float32 for half inputs, narrowed once.

    ``half``: the dtypes of the ``trigger`` tensor argument (default: the first tensor
    parameter) that take the float32 path. ``outputs``: one rule per output, ``"narrow"`` (to
    the trigger's dtype) or ``"float32"`` (kept as computed); default every output narrowed.
    ``device``: only tensors on this device type take it. ``guard``: a further condition, a
    scriptable predicate (``"module:function"``) called with the ``guard_arguments``.
    ``kernels``: the torch kernels (``kornia_halfpatch._kernels``) whose missing half CPU kernel
    the row stands in for: the row goes in only where one is missing, and promotes only the
    dtypes of ``half`` that lack one; empty, the row is needed wherever its fix is.
    ``autocast``: what the row does for a float32 trigger under ``torch.autocast`` in one of its
    promoted dtypes (half reaches the function through autocast's matmuls and convolutions):
    ``"float32"``, the float32 call outside autocast, outputs as computed (the default: a kornia
    function's half arithmetic is as wrong when autocast makes it half); ``"narrow"``, the same
    narrowed to autocast's dtype; None, the release's autocast path. ``half_inputs``: False for a
    function whose release refuses half inputs (as 0.9.0 does), which only autocast's half reaches.
    ``evaluate``: a cheaper float32 evaluation of the same function (``"module:function"``, called
    as ``f(original, dtype, *arguments)`` for half inputs in eager mode, outside autocast),
    returning the narrowed result, or None to leave the call to the widened original: tiles of a
    bounded float32 workspace narrowed straight into the output, the same float32 operations per
    element, so the half result is the release's float32 result narrowed. ``evaluate_float32``:
    that evaluation gives the release's float32 values bit for bit, so the float32 bands of the
    shim's own float32 evaluation of a half call (an augmentation's) take it too.
    """

    candidates: Union[str, Tuple[str, ...]]
    reason: str
    half: Tuple[str, ...] = ("float16", "bfloat16")
    outputs: Optional[Tuple[str, ...]] = None
    trigger: Optional[str] = None
    expects_parameters: Optional[Tuple[str, ...]] = None
    optional: bool = False

    scope = SCOPE_EVERYWHERE
    device: Optional[str] = None
    guard: Optional[str] = None
    guard_arguments: Tuple[str, ...] = ()
    kernels: Tuple[str, ...] = ()
    autocast: Optional[str] = "float32"
    half_inputs: bool = True
    evaluate: Optional[str] = None
    evaluate_float32: bool = False

    def promoted_dtypes(self) -> Tuple[str, ...]:
        """The dtypes of ``half`` this torch needs promoted (those without one of ``kernels``)."""
        if not self.kernels:
            return self.half
        from ._kernels import lacking

        return lacking(self.kernels, self.half)

    def build(self, original: Any) -> Any:
        from ._codegen import promote_wrapper

        return promote_wrapper(
            original,
            trigger=self.trigger,
            half=self.promoted_dtypes(),
            outputs=self.outputs,
            device=self.device,
            guard=load(self.guard) if self.guard is not None else None,
            guard_arguments=self.guard_arguments,
            autocast=self.autocast,
            half_inputs=self.half_inputs,
            evaluate=self.evaluate,
            evaluate_float32=self.evaluate_float32,
        )

    def target(self) -> Target:
        return Target(
            _candidates(self.candidates),
            self.build,
            self.expects_parameters,
            self.optional,
            self.scope,
            reason=self.reason,
            row=self,
            gate=kernel_gate(self.kernels, self.half) if self.kernels else None,
        )


@dataclass(frozen=True)
class PromoteForKornia(Promote):
    """Row: a torch op computed in float32 for half inputs, for kornia's calls only (module
    views), optionally only on ``device`` (a device type such as ``"cpu"``). Under autocast a
    torch op is autocast's to decide (``autocast=None``): these ops are not on its lower-precision
    lists, so a float32 input stays float32."""

    device: Optional[str] = None
    autocast: Optional[str] = None
    scope = SCOPE_KORNIA


@dataclass(frozen=True)
class WidenDtypes:
    """Row: a kornia dtype validator ``f(tensor, accepted, ...)`` whose accepted list gains the
    ``gains`` dtypes wherever it accepts float32."""

    candidates: Union[str, Tuple[str, ...]]
    reason: str
    tensor: str = "input"
    accepted: str = "accepted_dtypes"
    gains: Tuple[str, ...] = ("float16", "bfloat16")
    optional: bool = False

    def build(self, original: Any) -> Any:
        from ._codegen import widen_dtypes_wrapper

        return widen_dtypes_wrapper(original, tensor=self.tensor, accepted=self.accepted, gains=self.gains)

    def target(self) -> Target:
        return Target(
            _candidates(self.candidates),
            self.build,
            (self.tensor, self.accepted),
            self.optional,
            SCOPE_EVERYWHERE,
            reason=self.reason,
            row=self,
        )


@dataclass(frozen=True)
class EditSource:
    """Row: a kornia function or method recompiled from the installed release's own source with
    ``edits``, ``(old, new)`` text pairs, for a few lines of a network that would otherwise cost
    the whole network its half arithmetic (a tensor the network makes in float32 beside its half
    activations; a softmax's logits rounded in half before ``exp``).

    Each ``old`` must occur exactly once in the function's source, as written or with its quotes
    swapped (releases differ in quote style); a line break in ``new`` continues at ``old``'s
    indentation. The recompiled function keeps the release's module globals, decorators and
    closure: it is the release's code with the edited lines and nothing else, so eager,
    ``torch.compile`` and TorchScript (which reads the registered source) all run the edit. Where
    an ``old`` is missing or repeated (the release wrote it otherwise) the row is unsupported
    there and the fix's other rows go in. An edit must leave float32 and float64 to the
    release's own code path (a condition on the half dtype), which the contract battery checks
    bit for bit.
    """

    candidates: Union[str, Tuple[str, ...]]
    reason: str
    edits: Tuple[Tuple[str, str], ...] = ()
    optional: bool = True
    # "module:function" references the edited lines call, each under its own name (which starts
    # with ``_halfpatch_``, a name no release uses): passed in as closure cells, so the module's
    # globals stay the release's.
    helpers: Tuple[str, ...] = ()

    def check(self, original: Any) -> Optional[str]:
        from ._codegen import source_edit_problem

        return source_edit_problem(original, self.edits, [reference.rpartition(":")[2] for reference in self.helpers])

    def build(self, original: Any) -> Any:
        from ._codegen import edited_function

        helpers = {reference.rpartition(":")[2]: load(reference) for reference in self.helpers}
        return edited_function(original, self.edits, helpers=helpers)

    def target(self) -> Target:
        return Target(
            _candidates(self.candidates),
            self.build,
            None,
            self.optional,
            SCOPE_EVERYWHERE,
            reason=self.reason,
            row=self,
            check=self.check,
        )


Row = Union[Promote, PromoteForKornia, WidenDtypes, EditSource]
ROW_KINDS = (Promote, PromoteForKornia, WidenDtypes, EditSource)


def table(kind: type = Promote, **defaults: Any) -> Callable[..., Row]:
    """A fix table's row constructor: ``row(candidates, reason, **options)`` builds a ``kind``
    row with the table's ``defaults`` (stated once where the table starts; a row's own
    ``options`` win)."""

    def row(candidates: Union[str, Tuple[str, ...]], reason: str, **options: Any) -> Row:
        return kind(candidates, reason, **{**defaults, **options})

    return row


def _no_probe(originals: Sequence[Any]) -> Finding:
    return bug_present()


@dataclass(frozen=True)
class Fix:
    """A backported upstream fix: a table of targets and rows, and when it applies.

    ``probe(originals)`` receives the resolved originals (``None`` for absent optional targets)
    and returns a :class:`Finding`; it is the behaviour probe that keeps the shim from patching
    a release it does not know. ``when_absent()``, if given, explains a release where every
    target is absent (a Finding instead of "target absent"). ``demonstration`` names the CLI's
    live before/after (``"module:function"``, imported only by the CLI). ``describe()`` returns
    what the fix does on this machine, one line (``Report.facts``).
    """

    name: str
    targets: Tuple[Any, ...]  # Target or a row kind; rows are expanded to Targets
    probe: Callable[[Sequence[Any]], Finding] = _no_probe
    demonstration: Optional[str] = None
    upstream: str = environment.UPSTREAM_FIXED_RELEASE
    # Keyword options of apply() this fix takes: by default those the options manifest
    # (kornia_halfpatch._options) gives to this fix, which also checks their values in apply().
    # configure(given) runs before each install with the ones given (an empty dict means
    # defaults); a fix reads its settings through the manifest (_options.resolve(option, given)).
    options: Optional[Tuple[str, ...]] = None
    configure: Optional[Callable[[Dict[str, Any]], None]] = None
    when_absent: Optional[Callable[[], Finding]] = None
    describe: Optional[Callable[[], str]] = None
    # False for a probe whose answer depends on more than the originals, the fix's apply()
    # options and the KORNIA_HALFPATCH_* environment variables (the cached finding's key): the
    # engine then asks it at every apply().
    probe_cache: bool = True
    # The device types whose tensors the fix acts on: None, every device (a numerical fix: an
    # epsilon, a formula, a computation in float32); ("cpu",), a workaround for a CPU kernel's bug
    # or a missing CPU kernel, which does nothing on CUDA or MPS (docs/devices.md).
    devices: Optional[Tuple[str, ...]] = None

    def __post_init__(self) -> None:
        if self.options is None:
            object.__setattr__(self, "options", options_manifest.keywords_of(self.name))
        expanded = tuple(t.target() if isinstance(t, ROW_KINDS) else t for t in self.targets)
        object.__setattr__(self, "targets", expanded)

    @property
    def rows(self) -> Tuple[Target, ...]:
        """The targets that came from table rows (generated replacements)."""
        return tuple(t for t in self.targets if t.row is not None)

    def demonstrate(self) -> "Demonstration":
        if self.demonstration is None:
            raise LookupError(f"{self.name} has no demonstration")
        return load(self.demonstration)()


def load(reference: str) -> Any:
    """``"package.module:attribute"`` -> the attribute, imported now."""
    import importlib

    module_name, _, attribute = reference.partition(":")
    return functools.reduce(getattr, attribute.split("."), importlib.import_module(module_name))


@dataclass
class Demonstration:
    title: str
    cases: List[Tuple[str, str, str]] = field(default_factory=list)  # (what, unpatched, patched)
    holds: bool = True
    note: str = ""


# --------------------------------------------------------------------------------------------
# What the engine reports


@dataclass
class TargetStatus:
    target: str  # the resolved "module:path", or the first candidate when absent
    verdict: Verdict
    reason: str


@dataclass
class FixStatus:
    name: str
    verdict: Verdict
    reason: str
    targets: List[str] = field(default_factory=list)
    rebound: List[str] = field(default_factory=list)
    stale: List[str] = field(default_factory=list)
    target_statuses: List[TargetStatus] = field(default_factory=list)  # one per target of the fix

    @property
    def applied(self) -> bool:
        return self.verdict is Verdict.APPLIED


@dataclass
class Report:
    kornia_version: Optional[str]
    torch_version: Optional[str]
    fixes: Dict[str, FixStatus]
    facts: Dict[str, str] = field(default_factory=dict)  # fix -> what it does on this machine (Fix.describe)
    deferred: bool = False

    def __post_init__(self) -> None:
        self.fixes = dict(self.fixes)  # the report's own: later passes do not change it

    @property
    def applied(self) -> List[str]:
        return [name for name, fix in self.fixes.items() if fix.applied]

    @property
    def skipped(self) -> Dict[str, str]:
        return {name: fix.reason for name, fix in self.fixes.items() if not fix.applied}

    @property
    def verdicts(self) -> Dict[str, Verdict]:
        return {name: fix.verdict for name, fix in self.fixes.items()}

    @property
    def stale_references(self) -> List[str]:
        return sorted({ref for fix in self.fixes.values() for ref in fix.stale})

    def target_counts(self) -> Dict[Verdict, int]:
        counts: Dict[Verdict, int] = {}
        for fix in self.fixes.values():
            for target in fix.target_statuses:
                counts[target.verdict] = counts.get(target.verdict, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [f"kornia {self.kornia_version or 'not installed'}, torch {self.torch_version or 'not installed'}"]
        if self.deferred:
            lines.append("waiting for kornia to be imported; fixes go in then")
        for fix in self.fixes.values():
            mark = "applied" if fix.applied else "skipped"
            lines.append(f"  {fix.name:<22} {mark:<8} {fix.reason}")
            if fix.applied:
                for target in fix.target_statuses:
                    lines.append(f"      {target.verdict.value:<11} {target.target}: {target.reason}")
        for key, value in self.facts.items():
            lines.append(f"  {key} on this machine: {value}")
        for ref in self.stale_references:
            lines.append(f"  stale reference: {ref}")
        return "\n".join(lines)
