"""What can be read off a kernel's source without running it: memory reads whose mask does not mask.

On a GPU an unmasked ``tl.load`` past the end of a tensor reads whatever lies there, and a masked
``tl.store`` then throws that value away: every output is right, and the kernel still reads out of
bounds (a fault waiting for the allocation that ends at a page boundary). Tests cannot see it; the
source can.

A mask counts only if it can be False for some element. :func:`masked_load_problems` reads a kernel with a
small abstract interpreter over its AST (:class:`Value`, :class:`_Reader`): each local name is followed through
its assignments, branches and loops, and each expression becomes what can be known of it without running it:
a compile-time constant, a range of values, an exact sum of opaque terms (so that ``idx - idx`` is 0), and a
name for equal expressions. A missing mask, ``None``, a constant (``True``, ``1 == 1``, a constexpr, a global,
a ``tl.full`` of a constant) and a mask that is always true by construction (``idx >= 0`` for an index made of
``tl.program_id`` and ``tl.arange``, ``x == x``, ``m | True``, ``m | ~m``) count as no mask. Helper kernels are
read where they are called, with the values they are called with.

:func:`check_masked_loads` checks the kernels it is given and every kernel that a function's checked calls
launched (``launched_by``), and the notebook kernels those call. Where the calls ran is recorded by
:func:`triton_course.integrity.note_launches`: :func:`triton_course.checks.check` notes the kernels each call
of a notebook function launched (:class:`triton_course.integrity.KernelLaunches`), and the grader's judge
notes, for its proxy of that function, the kernels of each launch record it re-ran and accepted, as
:class:`KernelSource` (source text, never run). One call, ``check_masked_loads(add_kernel,
launched_by=add)``, works in both places.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import math
import operator
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .checks import CheckFailed
from .i18n import _
from .integrity import KernelSource, launched_kernels, note_launches  # noqa: F401 -- re-exported (the judge's names)

INF = math.inf
#: Statements and expressions one check may evaluate (loops are read twice, helpers once per call): a
#: source built to make the reading explode is refused instead of hanging the grader.
MAX_STEPS = 100_000
#: Keys of values (the text of what they are made of) longer than this stand by a digest.
MAX_KEY = 160
#: Helper calls inside helper calls read where they are called, at most this deep.
MAX_INLINE_DEPTH = 8


# ---------------------------------------------------------------------------------------------------
# What is known of one expression
# ---------------------------------------------------------------------------------------------------

_UNKNOWN = object()            # a compile-time constant whose value the reader does not know
#: A polynomial over opaque terms: ((monomial: the sorted keys of the terms it multiplies, coefficient), ...), offset.
Linear = tuple[tuple[tuple[tuple[str, ...], float], ...], float]
#: Products of sums are expanded up to this many monomials (beyond, the product is an opaque term).
MAX_MONOMIALS = 32


@dataclass(frozen=True)
class Value:
    """What the reader knows of an expression's value, for every element and every program.

    ``const``: a compile-time constant (literals, constexpr parameters, globals, arithmetic of constants);
    ``value`` its Python value when known. ``lo``/``hi``: bounds (a boolean is 0 or 1). ``linear``: the value
    as an exact polynomial of opaque terms (their bounds kept by the reader), so that ``a - b`` can be exact
    where bounds alone are not: ``(pid + 1) * BLOCK - pid * BLOCK`` is ``BLOCK``. ``key`` names the
    expression (equal keys, equal values) and ``negation`` the key of its logical negation. ``func``: the
    ``triton.language`` function (or helper kernel) the value names. ``items``: the values of a tuple."""

    key: str
    const: bool = False
    value: Any = _UNKNOWN
    lo: float = -INF
    hi: float = INF
    linear: Linear | None = None
    negation: str | None = None
    boolean: bool = False
    func: str | None = None
    items: tuple["Value", ...] | None = None

    def __post_init__(self) -> None:   # long keys (of long expressions) stand by a digest: equal keys, equal digests
        for name in ("key", "negation"):
            key = getattr(self, name)
            if key is not None and len(key) > MAX_KEY:
                object.__setattr__(self, name, "#" + hashlib.sha256(key.encode()).hexdigest()[:20])

    @property
    def always_true(self) -> bool:
        return self.lo > 0 or self.hi < 0

    @property
    def never_true(self) -> bool:
        return self.lo == 0 and self.hi == 0


def constant(value: Any) -> Value:
    """The :class:`Value` of a Python constant."""
    number = isinstance(value, (bool, int, float)) and not (isinstance(value, float) and math.isnan(value))
    try:
        v = float(value) if number else 0.0
    except OverflowError:     # an integer beyond float's range
        v = INF if value > 0 else -INF
    return Value(key=repr(value), const=True, value=value, lo=v if number else -INF, hi=v if number else INF,
                 linear=((), v) if number else None, boolean=isinstance(value, bool),
                 negation=repr(not value) if isinstance(value, bool) else None)


def _bounds(lo: float, hi: float) -> tuple[float, float]:
    """Bounds with any undefined end (inf - inf) widened."""
    return (-INF if math.isnan(lo) else lo), (INF if math.isnan(hi) else hi)


def _times(a: float, b: float) -> float:
    return 0.0 if a == 0 or b == 0 else a * b


def _product_bounds(a: Value, b: Value) -> tuple[float, float]:
    ends = [_times(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return _bounds(min(ends), max(ends))


def _linear_sum(a: Linear, b: Linear, sign: float = 1.0) -> Linear:
    terms = dict(a[0])
    for term, coeff in b[0]:
        terms[term] = terms.get(term, 0.0) + sign * coeff
    return tuple(sorted((t, c) for t, c in terms.items() if c != 0)), a[1] + sign * b[1]


def _linear_scaled(a: Linear, factor: float) -> Linear:
    return tuple((t, c * factor) for t, c in a[0] if c * factor != 0), a[1] * factor


def _linear_product(a: Linear, b: Linear) -> Linear | None:
    """``a * b`` expanded, or None if it has too many monomials."""
    left, right = [*a[0], ((), a[1])], [*b[0], ((), b[1])]
    if len(left) * len(right) > MAX_MONOMIALS:
        return None
    product: Linear = ((), 0.0)
    for (m1, c1) in left:
        for (m2, c2) in right:
            monomial = tuple(sorted(m1 + m2))
            product = _linear_sum(product, (((monomial, c1 * c2),), 0.0) if monomial else ((), c1 * c2))
    return product


#: Python operators the reader folds for constants of known value (numbers only, sizes kept small).
_FOLD: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def _fold(op: ast.AST, a: Any, b: Any) -> Any:
    """``a op b`` for two known constants, or _UNKNOWN (not numbers, an error, or a result too large to make)."""
    if isinstance(op, (ast.Is, ast.IsNot)) and _UNKNOWN not in (a, b):
        return (a is b) == isinstance(op, ast.Is)
    numbers = all(isinstance(x, (bool, int, float)) for x in (a, b))
    if not numbers or type(op) not in _FOLD:
        return _UNKNOWN
    if isinstance(op, (ast.Pow, ast.LShift)) and (abs(b) > 64 or abs(a) > 2**64):
        return _UNKNOWN
    try:
        result = _FOLD[type(op)](a, b)
    except (ArithmeticError, ValueError, TypeError):
        return _UNKNOWN
    return _UNKNOWN if isinstance(result, int) and result.bit_length() > 1024 else result


# ---------------------------------------------------------------------------------------------------
# Reading a kernel
# ---------------------------------------------------------------------------------------------------

#: Calls that read memory through a pointer, and the position of their mask argument (None: they take none).
READS = {"load": 1, "atomic_add": 2, "atomic_and": 2, "atomic_max": 2, "atomic_min": 2, "atomic_or": 2,
         "atomic_xchg": 2, "atomic_xor": 2, "atomic_cas": None}
#: Functions and methods whose value is their first argument's, as far as a mask goes.
_SAME = {"broadcast_to", "reshape", "view", "expand_dims", "ravel", "trans", "permute", "multiple_of",
         "max_contiguous", "max_constancy", "cast", "to", "broadcast", "flatten", "__getitem__"}
_COMPARE = {ast.Lt: ("<", ">="), ast.LtE: ("<=", ">"), ast.Gt: (">", "<="), ast.GtE: (">=", "<"),
            ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.MatMult: "@"}


@dataclass(frozen=True)
class UnmaskedRead:
    """A memory read whose mask does not mask: where it is and why."""

    kernel: str
    line: int          # within the kernel's source, its ``def`` line being 1
    text: str          # the call, as written
    why: str
    via: str = ""      # for a helper read where it is called: ", called from line N of K"

    def describe(self) -> str:
        # TRANSLATORS: {via} is nothing, or ", called from line N of K" (the next messages); {code} the call as
        # written; {why} why its mask does not mask.
        return _("  line {line} of {kernel}{via}: {code}\n    {why}").format(
            line=self.line, kernel=self.kernel, via=self.via, code=self.text, why=self.why)


@dataclass(frozen=True)
class _Parsed:
    """A kernel's function definition: ``name`` is the name it is defined with, ``text`` its source."""

    name: str
    tree: ast.FunctionDef
    text: str
    lines: list[str]


def without_decorators(fn: ast.FunctionDef) -> ast.FunctionDef:
    """``fn`` without its decorators (a shallow copy)."""
    bare = copy.copy(fn)
    bare.decorator_list = []
    return bare


def parse_kernel(name: str, src: str) -> _Parsed:
    """The kernel ``name``'s function definition in ``src`` (SyntaxError/ValueError if there is none)."""
    text = textwrap.dedent(src)
    tree = ast.parse(text)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None:
        raise ValueError(_("no function definition in the source of {kernel}").format(kernel=name))
    return _Parsed(fn.name, fn, text, text.splitlines())


@dataclass
class _Frame:
    """One kernel being read: its local names, the values it returns, where it was called from."""

    kernel: _Parsed
    locals: dict[str, Value]
    via: str = ""
    returns: list[Value] = field(default_factory=list)

    def line_of(self, node: ast.AST) -> tuple[int, str]:
        """(line within the kernel, the node's source text on one line) of ``node``."""
        first = self.kernel.tree.lineno
        text = " ".join((ast.get_source_segment(self.kernel.text, node) or ast.unparse(node)).split())
        return getattr(node, "lineno", first) - first + 1, text if len(text) <= 160 else text[:157] + "..."


class _Reader:
    """Abstract interpretation of kernels' bodies: :meth:`read_kernel` walks one, and records every memory read
    whose mask does not mask in ``found``."""

    def __init__(self, library: Mapping[str, _Parsed]):
        self.library = library              # kernels by name: helpers are read where they are called
        self.terms: dict[str, tuple[float, float]] = {}     # bounds of each opaque term
        self.tops: dict[str, Linear] = {}                    # the largest value of a tl.arange offset
        self.found: dict[tuple[str, int, int], UnmaskedRead] = {}
        self.visited: set[tuple[int, int, int]] = set()
        self.stack: list[str] = []
        self.steps = 0

    # -- kernels and statements -------------------------------------------------------------------------
    def read_kernel(self, kernel: _Parsed, args: Mapping[str, Value] | None = None, via: str = "") -> Value:
        """Read ``kernel``'s body; ``args`` binds its parameters (a helper read where it is called), else
        each parameter is unknown (a constexpr one a constant of unknown value, at least 0). Returns what it
        returns."""
        frame = _Frame(kernel, {}, via)
        for arg, default in self._parameters(kernel.tree):
            if args is not None and arg.arg in args:
                frame.locals[arg.arg] = args[arg.arg]
            elif args is not None and default is not None:
                frame.locals[arg.arg] = self.expr(default, frame)
            else:
                frame.locals[arg.arg] = self._parameter(kernel.name, arg)
        self.stack.append(kernel.name)
        try:
            self.block(kernel.tree.body, frame)
        finally:
            self.stack.pop()
        return self.join_all(frame.returns) if frame.returns else constant(None)

    @staticmethod
    def _parameters(fn: ast.FunctionDef) -> list[tuple[ast.arg, ast.expr | None]]:
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        return list(zip(positional, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))

    def _parameter(self, kernel: str, arg: ast.arg) -> Value:
        constexpr = arg.annotation is not None and ast.unparse(arg.annotation).endswith("constexpr")
        if constexpr:   # a block size, a count, a flag: fixed for the whole launch
            return self.term(f"{kernel}.{arg.arg}", 0.0, INF, const=True)
        return self.term(f"{kernel}.{arg.arg}")

    def block(self, body: list[ast.stmt], frame: _Frame) -> None:
        for stmt in body:
            self.statement(stmt, frame)

    def statement(self, s: ast.stmt, frame: _Frame) -> None:
        self._step()
        if isinstance(s, ast.Assign):
            value = self.expr(s.value, frame)
            for target in s.targets:
                self.bind(target, value, frame)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.bind(s.target, self.expr(s.value, frame), frame)
        elif isinstance(s, ast.AugAssign):
            current = self.expr(ast.Name(s.target.id, ast.Load()), frame) if isinstance(s.target, ast.Name) \
                else self.term(ast.unparse(s.target))
            self.bind(s.target, self.binary(s.op, current, self.expr(s.value, frame)), frame)
        elif isinstance(s, ast.Return):
            frame.returns.append(self.expr(s.value, frame) if s.value is not None else constant(None))
        elif isinstance(s, ast.If):
            self.branches(s, frame)
        elif isinstance(s, (ast.For, ast.While)):
            self.loop(s, frame)
        elif isinstance(s, (ast.With, ast.Try)):
            for part in (s.body, getattr(s, "orelse", []), getattr(s, "finalbody", [])):
                self.block(part, frame)
        elif not isinstance(s, (ast.FunctionDef, ast.ClassDef)):
            for child in ast.iter_child_nodes(s):   # expressions of other statements (assert, expression...)
                if isinstance(child, ast.expr):
                    self.expr(child, frame)

    def bind(self, target: ast.expr, value: Value, frame: _Frame) -> None:
        """Assign ``value`` to ``target``, unpacking tuples element by element."""
        if isinstance(target, ast.Name):
            frame.locals[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.items if value.items is not None and len(value.items) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                item = items[i] if items is not None else self.term(f"{value.key}[{i}]")
                self.bind(element, item, frame)
        else:
            self.expr(target, frame)

    def branches(self, s: ast.If, frame: _Frame) -> None:
        """Both branches are read (their loads are checked); a test of known truth keeps only its branch's names."""
        test = self.expr(s.test, frame)
        before = dict(frame.locals)
        self.block(s.body, frame)
        taken = frame.locals
        frame.locals = dict(before)
        self.block(s.orelse, frame)
        if test.always_true or (test.const and test.value is not _UNKNOWN and bool(test.value)):
            frame.locals = taken
        elif not (test.never_true or test.const and test.value is not _UNKNOWN):
            frame.locals = self.join_names(taken, frame.locals)

    def loop(self, s: ast.For | ast.While, frame: _Frame) -> None:
        """The body read twice: as the first iteration runs it, then from names widened to cover every
        iteration. A read flagged in either is flagged (the first iteration's mask is what that iteration uses)."""
        before = dict(frame.locals)
        for widened in (False, True):
            if widened:
                frame.locals = self.widen(before, self.join_names(before, frame.locals))
            if isinstance(s, ast.For):
                self.bind(s.target, self.loop_variable(s, frame), frame)
            else:
                self.expr(s.test, frame)
            self.block(s.body, frame)
        frame.locals = self.join_names(before, frame.locals)
        self.block(s.orelse, frame)

    def loop_variable(self, s: ast.For, frame: _Frame) -> Value:
        """The loop variable of ``for i in range(start, stop, step)`` (or tl.range, tl.static_range): between
        start and stop; of any other loop, unknown."""
        key = f"{frame.kernel.name}.{ast.unparse(s.target)}@{s.lineno}"
        it = s.iter
        if not (isinstance(it, ast.Call) and self.expr(it.func, frame).func in ("range", "static_range")):
            self.expr(it, frame)
            return self.term(key)
        bounds = [self.expr(a, frame) for a in it.args]
        if len(bounds) == 1:
            bounds = [constant(0), *bounds]
        step = bounds[2] if len(bounds) > 2 else constant(1)
        if step.const and isinstance(step.value, (int, float)) and step.value > 0:
            return self.term(key, bounds[0].lo, bounds[1].hi - 1)
        if step.const and isinstance(step.value, (int, float)) and step.value < 0:
            return self.term(key, bounds[1].lo + 1, bounds[0].hi)
        return self.term(key)

    # -- expressions --------------------------------------------------------------------------------------
    def expr(self, node: ast.expr, frame: _Frame) -> Value:
        self._step()
        if isinstance(node, ast.Constant):
            return constant(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id, frame)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, frame)
        if isinstance(node, ast.Call):
            return self.call(node, frame)
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.expr(node.left, frame), self.expr(node.right, frame))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node.op, self.expr(node.operand, frame))
        if isinstance(node, ast.BoolOp):
            return self.logical(isinstance(node.op, ast.Or), [self.expr(v, frame) for v in node.values])
        if isinstance(node, ast.Compare):
            return self.comparison(node, frame)
        if isinstance(node, ast.IfExp):
            return self.choose(self.expr(node.test, frame), self.expr(node.body, frame), self.expr(node.orelse, frame))
        if isinstance(node, (ast.Tuple, ast.List)):
            items = tuple(self.expr(e, frame) for e in node.elts)
            known = all(i.const and i.value is not _UNKNOWN for i in items)
            return Value(key="(" + ", ".join(i.key for i in items) + ")", const=all(i.const for i in items),
                         value=tuple(i.value for i in items) if known else _UNKNOWN, items=items)
        if isinstance(node, ast.Subscript):   # x[:, None], x[None, :]: the same values, broadcast
            base = self.expr(node.value, frame)
            index = self.expr(node.slice, frame) if not isinstance(node.slice, ast.Slice) else constant(None)
            if base.items is not None and index.const and isinstance(index.value, int) \
                    and -len(base.items) <= index.value < len(base.items):
                return base.items[index.value]
            key = f"{base.key}[{ast.unparse(node.slice)}]"   # other elements, or the same along a new axis
            return self.term(key, base.lo, base.hi, const=base.const, boolean=base.boolean)
        for child in ast.iter_child_nodes(node):   # anything else: its reads are still checked
            if isinstance(child, ast.expr):
                self.expr(child, frame)
        return self.term(f"{frame.kernel.name}:{ast.unparse(node)}")

    def name(self, name: str, frame: _Frame) -> Value:
        """A local name's value; any other name is a global, which a Triton kernel may read only as a
        compile-time constant (or a function: triton.language, a helper kernel, a builtin)."""
        if name in frame.locals:
            return frame.locals[name]
        return Value(key=name, const=True, func=name)

    def attribute(self, node: ast.Attribute, frame: _Frame) -> Value:
        base = self.expr(node.value, frame)
        if base.func is not None:          # tl.load, triton.language.load, tl.float32: a global's attribute
            return Value(key=f"{base.key}.{node.attr}", const=True, func=node.attr)
        if node.attr in ("dtype", "shape", "element_ty", "type", "numel", "ndim"):
            return Value(key=f"{base.key}.{node.attr}", const=True)
        return self.term(f"{base.key}.{node.attr}", base.lo, base.hi, boolean=base.boolean) if node.attr == "T" \
            else self.term(f"{base.key}.{node.attr}")

    def term(self, key: str, lo: float = -INF, hi: float = INF, const: bool = False, boolean: bool = False,
             negation: str | None = None) -> Value:
        """An opaque value: known only by its key and bounds."""
        lo, hi = _bounds(lo, hi)
        value = Value(key=key, const=const, lo=lo, hi=hi, boolean=boolean, negation=negation)
        self.terms[value.key] = (lo, hi)
        return replace(value, linear=((((value.key,), 1.0),), 0.0))

    def linear_bounds(self, linear: Linear) -> tuple[float, float]:
        """Bounds of a polynomial from its terms' bounds."""
        lo = hi = linear[1]
        for monomial, coeff in linear[0]:
            m_lo, m_hi = 1.0, 1.0
            for key in monomial:
                t_lo, t_hi = self.terms.get(key, (-INF, INF))
                ends = [_times(x, y) for x in (m_lo, m_hi) for y in (t_lo, t_hi)]
                m_lo, m_hi = _bounds(min(ends), max(ends))
            ends = [_times(coeff, m_lo), _times(coeff, m_hi)]
            lo, hi = _bounds(lo + min(ends), hi + max(ends))
        return lo, hi

    def difference_bounds(self, linear: Linear) -> tuple[float, float]:
        """Bounds of a polynomial, also with each ``tl.arange`` term replaced by its largest value, ``end - 1``
        (for ``idx < first + BLOCK``: an offset of the block never reaches its end)."""
        lo, hi = self.linear_bounds(linear)
        for sign in (1.0, -1.0):
            bounded = ((), linear[1])
            for monomial, coeff in linear[0]:
                top = self.tops.get(monomial[0]) if len(monomial) == 1 and coeff * sign > 0 else None
                bounded = _linear_sum(bounded, _linear_scaled(top, coeff) if top is not None
                                      else ((((monomial, coeff),), 0.0)))
            if bounded != linear:
                b_lo, b_hi = self.linear_bounds(bounded)
                lo, hi = (lo, min(hi, b_hi)) if sign > 0 else (max(lo, b_lo), hi)
        return lo, hi

    def binary(self, op: ast.operator, a: Value, b: Value) -> Value:
        key = f"({a.key} {_SYMBOL.get(type(op), '?')} {b.key})"
        if a.const and b.const:
            folded = _fold(op, a.value, b.value)
            return replace(constant(folded), key=key) if folded is not _UNKNOWN else Value(key=key, const=True)
        if isinstance(op, (ast.BitAnd, ast.BitOr)) and a.boolean and b.boolean:
            return self.logical(isinstance(op, ast.BitOr), [a, b])
        if isinstance(op, (ast.Add, ast.Sub)) and a.linear is not None and b.linear is not None:
            sign = 1.0 if isinstance(op, ast.Add) else -1.0
            lo, hi = (a.lo + b.lo, a.hi + b.hi) if sign > 0 else (a.lo - b.hi, a.hi - b.lo)
            return replace(self.term(key, *_bounds(lo, hi)), linear=_linear_sum(a.linear, b.linear, sign))
        if isinstance(op, ast.Mult):
            value = self.term(key, *_product_bounds(a, b))
            product = _linear_product(a.linear, b.linear) if a.linear is not None and b.linear is not None else None
            return replace(value, linear=product) if product is not None else value
        if isinstance(op, ast.Mod) and a.lo >= 0 and b.lo >= 0 and b.linear is not None:
            remainder = self.term(key, 0.0, b.hi - 1)     # from 0 to b - 1 (b > 0: nothing is taken modulo 0)
            self.tops[remainder.key] = _linear_sum(b.linear, ((), -1.0))
            return remainder
        if isinstance(op, ast.FloorDiv) and b.const and isinstance(b.value, int) and b.value > 0 and a.lo >= 0:
            return self.term(key, a.lo // b.value, a.hi // b.value if a.hi < INF else INF)
        return self.term(key)

    def unary(self, op: ast.unaryop, a: Value) -> Value:
        if isinstance(op, ast.Not) or (isinstance(op, ast.Invert) and a.boolean):
            if a.const and a.value is not _UNKNOWN:
                return constant(not a.value) if isinstance(op, ast.Not) else replace(constant(not a.value),
                                                                                     key=f"~{a.key}")
            lo, hi = (1.0, 1.0) if a.never_true else (0.0, 0.0) if a.always_true else (0.0, 1.0)
            key = a.negation or f"not {a.key}"
            return replace(self.term(key, lo, hi, boolean=True, negation=a.key), const=a.const)
        if a.const:
            if a.value is _UNKNOWN or not isinstance(a.value, (int, float)):
                return Value(key=f"-{a.key}", const=True)
            return constant({ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
                            [type(op)](a.value))
        if isinstance(op, ast.USub):
            value = self.term(f"-{a.key}", -a.hi, -a.lo)
            return replace(value, linear=_linear_scaled(a.linear, -1.0)) if a.linear is not None else value
        return a if isinstance(op, ast.UAdd) else self.term(f"~{a.key}")

    def logical(self, any_of: bool, values: list[Value]) -> Value:
        """``or`` / ``|`` (``any_of``) and ``and`` / ``&`` of truth values."""
        joiner = " | " if any_of else " & "
        key = "(" + joiner.join(v.key for v in values) + ")"
        if all(v.const for v in values):
            known = all(v.value is not _UNKNOWN for v in values)
            truth = (any if any_of else all)(bool(v.value) for v in values) if known else _UNKNOWN
            return replace(constant(truth), key=key) if known else Value(key=key, const=True, boolean=True)
        keys = {v.key for v in values}
        complementary = any(v.negation in keys for v in values)
        if any_of:
            always, never = any(v.always_true for v in values) or complementary, all(v.never_true for v in values)
        else:
            always, never = all(v.always_true for v in values), any(v.never_true for v in values) or complementary
        return self.term(key, 0.0 if not always else 1.0, 1.0 if not never else 0.0, boolean=True)

    def comparison(self, node: ast.Compare, frame: _Frame) -> Value:
        left = self.expr(node.left, frame)
        parts = []
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node, frame)
            parts.append(self.compare(op, left, right))
            left = right
        return parts[0] if len(parts) == 1 else self.logical(False, parts)

    def compare(self, op: ast.cmpop, a: Value, b: Value) -> Value:
        symbol, negated = _COMPARE.get(type(op), (type(op).__name__, None))
        key = f"({a.key} {symbol} {b.key})"
        if a.const and b.const:
            folded = _fold(op, a.value, b.value)
            return replace(constant(folded), key=key) if isinstance(folded, bool) else \
                Value(key=key, const=True, boolean=True)
        if negated is None:
            return self.term(key, 0.0, 1.0, boolean=True)
        lo, hi = _bounds(a.lo - b.hi, a.hi - b.lo)        # bounds of a - b
        if a.linear is not None and b.linear is not None:
            exact_lo, exact_hi = self.difference_bounds(_linear_sum(a.linear, b.linear, -1.0))
            lo, hi = max(lo, exact_lo), min(hi, exact_hi)
        always, never = {
            ast.Lt: (hi < 0, lo >= 0), ast.LtE: (hi <= 0, lo > 0), ast.Gt: (lo > 0, hi <= 0),
            ast.GtE: (lo >= 0, hi < 0), ast.Eq: (lo == hi == 0, lo > 0 or hi < 0),
            ast.NotEq: (lo > 0 or hi < 0, lo == hi == 0)}[type(op)]
        return self.term(key, 1.0 if always else 0.0, 0.0 if never else 1.0, boolean=True,
                         negation=f"({a.key} {negated} {b.key})")

    def choose(self, test: Value, yes: Value, no: Value) -> Value:
        """``yes if test else no`` (and tl.where): one side when the test's truth is known, else both."""
        if test.always_true or (test.const and test.value is not _UNKNOWN and bool(test.value)):
            return yes
        if test.never_true or (test.const and test.value is not _UNKNOWN):
            return no
        return self.join(yes, no, f"where({test.key}, {yes.key}, {no.key})")

    def join(self, a: Value, b: Value, key: str | None = None) -> Value:
        """What is known of a value that is ``a`` or ``b``."""
        if a == b:
            return a
        if a.const and b.const:
            same = a.value is not _UNKNOWN and type(a.value) is type(b.value) and a.value == b.value
            return constant(a.value) if same else Value(key=key or f"{a.key}|{b.key}", const=True,
                                                        boolean=a.boolean and b.boolean)
        joined = self.term(key or f"join({a.key}, {b.key})", min(a.lo, b.lo), max(a.hi, b.hi),
                           boolean=a.boolean and b.boolean)
        return replace(joined, func=a.func if a.func == b.func else None)

    def join_all(self, values: list[Value]) -> Value:
        result = values[0]
        for v in values[1:]:
            result = self.join(result, v)
        return result

    def join_names(self, a: dict[str, Value], b: dict[str, Value]) -> dict[str, Value]:
        """Local names after one of two paths: a name bound on one path only keeps that binding."""
        return {n: self.join(a[n], b[n]) if n in a and n in b else a.get(n, b.get(n)) for n in {**a, **b}}

    def widen(self, before: dict[str, Value], joined: dict[str, Value]) -> dict[str, Value]:
        """Names that changed in one iteration, with bounds opened in the direction they moved."""
        out = dict(joined)
        for n, v in joined.items():
            old = before.get(n)
            if old is None or old == v or v.const:
                continue
            lo = v.lo if v.lo >= old.lo else -INF
            hi = v.hi if v.hi <= old.hi else INF
            out[n] = self.term(f"{v.key}@loop", lo, hi, boolean=v.boolean)
        return out

    def _step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise CheckFailed(_("the kernel is too long or too deeply nested for the grader to read its masks"))

    # -- calls ----------------------------------------------------------------------------------------------
    def call(self, node: ast.Call, frame: _Frame) -> Value:
        f = node.func
        if isinstance(f, ast.Attribute):
            base = self.expr(f.value, frame)
            if base.func is None:       # a method of a value: x.to(tl.float32), x.reshape(...)
                args = [self.expr(a.value if isinstance(a, ast.Starred) else a, frame) for a in node.args]
                args += [self.expr(k.value, frame) for k in node.keywords]
                if f.attr == "to":
                    return base
                key = f"{base.key}.{f.attr}({', '.join(a.key for a in args)})"
                return self.term(key, base.lo, base.hi, boolean=base.boolean) if f.attr in _SAME else \
                    replace(self.term(key), const=base.const and all(a.const for a in args))
            func = Value(key=f"{base.key}.{f.attr}", const=True, func=f.attr)
        else:
            func = self.expr(f, frame)
        name = func.func
        if name in READS:
            return self.read(node, name, frame)
        if name in self.library and name not in self.stack and len(self.stack) < MAX_INLINE_DEPTH:
            return self.inline(node, name, frame)
        if name == "getattr" and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
            base = self.expr(node.args[0], frame)
            if base.func is not None and isinstance(node.args[1].value, str):   # getattr(tl, "load")
                return Value(key=f"{base.key}.{node.args[1].value}", const=True, func=node.args[1].value)
        args = [self.expr(a.value if isinstance(a, ast.Starred) else a, frame) for a in node.args]
        kwargs = {k.arg or "**": self.expr(k.value, frame) for k in node.keywords}
        key = f"{func.key}({', '.join([a.key for a in args] + [f'{k}={v.key}' for k, v in kwargs.items()])})"
        return self.library_call(name, func.const, args, kwargs, key)

    def library_call(self, name: str | None, known_function: bool, args: list[Value], kwargs: dict[str, Value],
                     key: str) -> Value:
        """The value of ``name(*args, **kwargs)`` for the functions of triton.language that make indices and
        constant tensors; any other function of constants gives a constant, of anything else an opaque value."""
        every = [*args, *kwargs.values()]

        def arg(i: int, keyword: str) -> Value | None:
            return args[i] if len(args) > i else kwargs.get(keyword)

        if name == "program_id":
            return self.term(key, 0.0, INF)
        if name == "num_programs":
            return self.term(key, 1.0, INF)
        if name == "arange" and arg(0, "start") is not None and arg(1, "end") is not None:
            return self.arange(key, arg(0, "start"), arg(1, "end"))
        if name in ("zeros", "zeros_like"):
            return replace(constant(0), key=key)
        if name in ("ones", "ones_like"):
            return replace(constant(1), key=key)
        if name in ("full", "full_like") and arg(1, "value") is not None:
            return arg(1, "value")
        if name == "where" and len(args) == 3:
            return self.choose(*args)
        if name in ("minimum", "maximum") and len(args) == 2 and not any(a.const for a in args):
            pick = min if name == "minimum" else max
            return self.term(key, pick(args[0].lo, args[1].lo), pick(args[0].hi, args[1].hi))
        if name in _SAME and args:
            return args[0]
        if name in _BUILTINS and args and not kwargs and \
                all(a.const and isinstance(a.value, (bool, int, float)) for a in args):
            try:
                return replace(constant(_BUILTINS[name](*[a.value for a in args])), key=key)
            except (TypeError, ValueError, OverflowError):
                return Value(key=key, const=True)
        if known_function and every and all(a.const for a in every):
            return Value(key=key, const=True)
        return self.term(key)

    def arange(self, key: str, start: Value, end: Value) -> Value:
        """``tl.arange(start, end)``: start plus an offset from 0 to end - start - 1 (its largest value kept
        as a polynomial too, in ``tops``); end > start, so a block size it ends at is at least 1."""
        if end.linear is not None and len(end.linear[0]) == 1 and end.linear[0][0][1] == 1.0 \
                and len(end.linear[0][0][0]) == 1:
            size = end.linear[0][0][0][0]        # tl.arange(0, BLOCK): BLOCK > 0
            lo, hi = self.terms.get(size, (-INF, INF))
            self.terms[size] = (max(lo, start.lo + 1 - end.linear[1]), hi)
        offset = self.term(f"{key}-offset", 0.0, end.hi - start.lo - 1)
        if start.linear is not None and end.linear is not None:
            self.tops[offset.key] = _linear_sum(_linear_sum(end.linear, start.linear, -1.0), ((), -1.0))
        value = self.term(key, start.lo, end.hi - 1)
        return replace(value, linear=_linear_sum(start.linear, offset.linear)) if start.linear is not None else value

    def inline(self, node: ast.Call, name: str, frame: _Frame) -> Value:
        """A helper kernel read where it is called, its parameters bound to the values it is called with."""
        helper = self.library[name]
        params = [a.arg for a, _default in self._parameters(helper.tree)]
        args: dict[str, Value] = {}
        for param, a in zip(params, node.args):
            if isinstance(a, ast.Starred):
                break
            args[param] = self.expr(a, frame)
        args.update({k.arg: self.expr(k.value, frame) for k in node.keywords if k.arg is not None})
        line, _text = frame.line_of(node)
        # TRANSLATORS: appended to "line N of helper": where the helper kernel is called; {via} is nothing, or this
        # message again for the kernel that called that one.
        return self.read_kernel(helper, args, _(", called from line {line} of {kernel}{via}").format(
            line=line, kernel=frame.kernel.name, via=frame.via))

    def read(self, node: ast.Call, name: str, frame: _Frame) -> Value:
        """A memory read: its arguments (reads nested in a pointer are checked too), then its mask."""
        self.visited.add((id(frame.kernel), node.lineno, node.col_offset))
        args = [self.expr(a.value if isinstance(a, ast.Starred) else a, frame) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, frame) for k in node.keywords if k.arg is not None}
        why = read_problem(node, name, args, kwargs)
        where = (frame.kernel.name, node.lineno - frame.kernel.tree.lineno, node.col_offset)
        if why is not None and where not in self.found:
            line, text = frame.line_of(node)
            self.found[where] = UnmaskedRead(frame.kernel.name, line, text, why, frame.via)
        return self.term(f"{name}@{frame.kernel.name}:{node.lineno}:{node.col_offset}")

    def unvisited_reads(self, kernel: _Parsed) -> None:
        """Reads in code the walk does not follow (a comprehension, a lambda): read with every local name unknown."""
        stored = {n.id for n in ast.walk(kernel.tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        frame = _Frame(kernel, {n: self.term(f"{kernel.name}.{n}?") for n in stored})
        frame.locals.update({a.arg: self._parameter(kernel.name, a) for a, _ in self._parameters(kernel.tree)})
        for node in ast.walk(kernel.tree):
            if isinstance(node, ast.Call) and (id(kernel), node.lineno, node.col_offset) not in self.visited:
                func = self.expr(node.func, frame)
                if func.func in READS:
                    self.read(node, func.func, frame)


#: Builtins folded for constants of known value.
_BUILTINS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs, "int": int, "float": float,
                                            "bool": bool}


def read_problem(node: ast.Call, name: str, args: list[Value], kwargs: dict[str, Value]) -> str | None:
    """Why the memory read ``node`` (a call of ``tl.<name>`` with these argument values) is not masked, or None."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return _("its arguments are unpacked (* or **), so its mask cannot be read: pass the mask by name, mask=...")
    at = READS[name]
    if at is None:
        return _("tl.{function} takes no mask: it reads (and writes) every lane's address").format(function=name)
    checks = kwargs.get("boundary_check", args[3] if name == "load" and len(args) > 3 else None)
    if checks is not None and not (checks.const and checks.value is not _UNKNOWN and not checks.value):
        return None      # a block pointer's boundary check on at least one dimension
    positional = node.args[at] if len(node.args) > at else None
    mask_node = next((k.value for k in node.keywords if k.arg == "mask"), positional)
    mask = kwargs.get("mask", args[at] if len(args) > at else None)
    # TRANSLATORS: {boundary_check} in the next messages is nothing, or this remark.
    empty = _(" (and boundary_check=() checks no dimension)") if checks is not None else ""
    if mask is None or mask_node is None:
        other = "other" in kwargs or (name == "load" and len(args) > 2)
        # TRANSLATORS: {other} is nothing, or the next message.
        return _("has no mask{boundary_check}{other}").format(
            boundary_check=empty,
            other=_(" (other= alone masks nothing: it is only what masked-off lanes get)") if other else "")
    shown = ast.unparse(mask_node)
    if mask.const and mask.value is None:
        return _("mask=None is no mask{boundary_check}").format(boundary_check=empty)
    if mask.const:
        return _("its mask `{mask}` is a constant, the same for every element: a constant mask is no "
                 "mask{boundary_check}").format(mask=shown, boundary_check=empty)
    if mask.always_true:
        return _("this mask, `{mask}`, is always true: it masks nothing{boundary_check}").format(
            mask=shown, boundary_check=empty)
    return None


# ---------------------------------------------------------------------------------------------------
# Which kernels: those named, those a function's calls launched, and the kernels they call
# ---------------------------------------------------------------------------------------------------

def _python_function(kernel: object) -> Callable[..., Any] | None:
    """The Python function under a Triton kernel object (JITFunction, InterpretedFunction, Autotuner...)."""
    obj = kernel
    for _ in range(5):
        if inspect.isfunction(obj):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def _is_kernel_object(obj: object) -> bool:
    kind = type(obj)
    return kind.__module__.startswith("triton.") and kind.__name__ in (
        "JITFunction", "InterpretedFunction", "Autotuner", "Heuristics")


def _is_course_kernel(kernel: object) -> bool:
    pyfn = _python_function(kernel)
    return pyfn is not None and str(getattr(pyfn, "__module__", "")).split(".")[0] == __name__.split(".")[0]


def kernel_source(kernel: object) -> tuple[str, str]:
    """(name, source) of a kernel: a :class:`KernelSource`, or a ``@triton.jit`` function of this process."""
    if isinstance(kernel, KernelSource):
        return kernel.name, kernel.src
    pyfn = _python_function(kernel)
    name = getattr(pyfn, "__name__", None) or getattr(kernel, "__name__", None) or _("the kernel")
    src = getattr(kernel, "src", None)
    if not isinstance(src, str) and pyfn is not None:
        try:
            src = inspect.getsource(pyfn)
        except (OSError, TypeError):
            src = None
    if not isinstance(src, str):
        raise CheckFailed(_("the grader could not read the source of {kernel}: define it with @triton.jit in a "
                            "cell").format(kernel=name))
    return str(name), src


def _called_kernels(kernel: object) -> list[tuple[str, object]]:
    """(the name it is called by, kernel) of each kernel a kernel of this process calls (its globals that are
    Triton kernels)."""
    pyfn = _python_function(kernel)
    if pyfn is None:
        return []
    found = [(n, pyfn.__globals__.get(n)) for n in pyfn.__code__.co_names]
    return [(n, k) for n, k in found if _is_kernel_object(k)]


def kernel_sources(kernels: Iterable[object]) -> list[tuple[str, str]]:
    """(name, source) of each kernel and of every kernel of this process they call, once each (the
    course's own kernels left out); a kernel called by another name (``helper = masked_load``) once more under
    that name, so that it is read where it is called."""
    pending, seen, out = list(kernels), [], []
    while pending:
        kernel = pending.pop(0)
        if any(kernel is k for k in seen) or _is_course_kernel(kernel):
            continue
        seen.append(kernel)
        entry = kernel_source(kernel)
        if entry not in out:
            out.append(entry)
        for alias, called in _called_kernels(kernel):
            name, src = kernel_source(called)
            if alias != name and (alias, src) not in out:
                out.append((alias, src))
            pending.append(called)
    return out


# ---------------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------------

def masked_load_problems(kernels: Iterable[tuple[str, str]]) -> list[UnmaskedRead]:
    """Every memory read of ``kernels`` ((name, source) pairs) whose mask does not mask. A kernel that another
    calls is also read where it is called, with the values it is called with (the last source of a name is the
    one read there). SyntaxError or ValueError for a source that is not a function."""
    parsed, shapes, library = [], set(), {}
    for name, src in kernels:      # the same kernel as handed in, as launched or by another name is read once
        kernel = parse_kernel(name, src)
        library[name] = kernel     # and read where it is called by that name
        shape = ast.dump(without_decorators(kernel.tree), include_attributes=False)
        if shape not in shapes:
            shapes.add(shape)
            parsed.append(kernel)
    reader = _Reader(library)
    try:
        for kernel in parsed:
            reader.read_kernel(kernel)
        for kernel in parsed:
            reader.unvisited_reads(kernel)
    except RecursionError:
        raise CheckFailed(_("a kernel is too deeply nested for the grader to read its masks")) from None
    order = {k.name: i for i, k in reversed(list(enumerate(parsed)))}
    return sorted(reader.found.values(), key=lambda r: (order.get(r.kernel, 0), r.line))


def check_masked_loads(*kernels: object, launched_by: object = None, quiet: bool = False) -> None:
    """Raise :class:`CheckFailed` naming every memory read whose mask does not mask (see the module's docs), in
    ``kernels`` (``@triton.jit`` functions, or :class:`KernelSource`), in every kernel that the checked calls of
    ``launched_by`` launched (:func:`launched_kernels`), and in the kernels those call. Prints one line if all
    are masked, unless ``quiet``."""
    __tracebackhide__ = True
    objects = [*kernels, *(launched_kernels(launched_by) if launched_by is not None else [])]
    sources = kernel_sources(objects)
    if not sources:
        who = launched_by.__name__ if hasattr(launched_by, "__name__") else _("the function")
        raise CheckFailed(_("no kernel to read: {function} has not launched a Triton kernel in a checked call "
                            "yet").format(function=who))
    names = ", ".join(dict.fromkeys(name for name, _src in sources))
    try:
        bad = masked_load_problems(sources)
    except (SyntaxError, ValueError) as exc:
        # TRANSLATORS: {error} is Python's message (a SyntaxError's, in English) or the previous message.
        raise CheckFailed(_("the source of {kernels} could not be read: {error}").format(kernels=names,
                                                                                        error=exc)) from None
    if bad:
        # TRANSLATORS: {reads} lists each read: "  line N of K: tl.load(...)" and, indented below it, why.
        raise CheckFailed(_(
            "{count} memory read(s) in {kernels} have no mask that masks:\n{reads}\nOn a GPU such a load reads past "
            "the end of the tensor in the last block (a masked store then hides it). Give every tl.load a mask that "
            "is False past the end, such as mask=idx < n_elements (and other= for the lanes it switches off).").format(
            count=len(bad), kernels=names, reads="\n".join(r.describe() for r in bad)))
    if not quiet:
        print(_("ok  every load is masked in {kernels}").format(kernels=names))
