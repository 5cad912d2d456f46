"""What a task's signature says about its arguments, worked out once per task: the check
that an enqueue's arguments bind to it, the check of their values against the annotations
(``validate=True``), and the rebuilding of dataclasses and pydantic models, which travel as
their fields, from the annotations of the parameters and of the return value.

pydantic is never imported here: a value or annotation is a pydantic model only if pydantic
is loaded already (the user's code imported it); validation imports it lazily when installed.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from taskq.errors import EnqueueError

Rebuild = Callable[[Any], Any]
_NO_HINTS: dict[str, Any] = {}
_ANYTHING = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)


class ArgSpec:
    """One task's signature (without ``self`` for a ``bind=True`` task).

    The bind check is worked out from counts and names once (``Signature.bind`` only
    words the error). The annotations are read at first use (a dataclass may be defined
    after the task).
    """

    def __init__(self, name: str, fn: Callable[..., Any], *, bound: bool) -> None:
        self.name = name
        self._fn = fn
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # (a builtin without one: nothing is checked)
            signature = _ANYTHING
        params = list(signature.parameters.values())[1 if bound else 0 :]
        self.signature = signature.replace(parameters=params)
        self._params = params
        kinds = [p.kind for p in params]
        self._max_positional = (
            sys.maxsize
            if inspect.Parameter.VAR_POSITIONAL in kinds
            else sum(1 for k in kinds if k in _POSITIONAL)
        )
        self._keyword_at = {
            p.name: i if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else sys.maxsize
            for i, p in enumerate(params)
            if p.kind in _BY_KEYWORD
        }
        """Each parameter a keyword may name: its position (maxsize: keyword-only)."""
        self._required = [
            (i if p.kind in _POSITIONAL else sys.maxsize, p.name if p.kind in _BY_KEYWORD else None)
            for i, p in enumerate(params)
            if p.default is p.empty and p.kind in (*_POSITIONAL, *_BY_KEYWORD)
        ]
        """Each parameter without a default: its position, and its name if a keyword may
        give it."""
        self._any_keyword = inspect.Parameter.VAR_KEYWORD in kinds
        self._hints: dict[str, Any] | None = None
        self._rebuilds: tuple[dict[str, Rebuild], Rebuild | None] | None = None
        self.rebuilds_args: bool | None = None
        """Whether a parameter's annotation names a dataclass or model (None: not known
        until the first :meth:`rebuilt`): False lets a worker skip the call per job."""

    # -- at enqueue -------------------------------------------------------------------------

    def check(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Refuse arguments that do not bind to the signature.

        Raises:
            EnqueueError: naming the missing or unexpected argument.
        """
        if self._binds(args, kwargs):
            return
        try:  # (its error names what is wrong)
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise EnqueueError(f"{self.name}: {exc}") from None

    def _binds(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """Whether the arguments bind, told from the counts and names worked out once (a
        few hundred ns, where :meth:`inspect.Signature.bind` takes microseconds); False
        sends the caller to ``bind`` for its error."""
        given = len(args)
        if given > self._max_positional:
            return False
        for key in kwargs:
            at = self._keyword_at.get(key)
            if (at is None and not self._any_keyword) or (at is not None and at < given):
                return False
        for position, name in self._required:  # (a loop: all() makes a generator per call)
            if position >= given and name not in kwargs:
                return False
        return True

    def validate(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Check the values against the annotations: with pydantic (strict: no "10" for an
        int) when it is installed, else with :func:`conforms`.

        Raises:
            EnqueueError: naming the parameter, what it wants and what it got.
        """
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:  # (a positional-only name caught by **kwargs: bind cannot tell)
            return
        hints = self.hints()
        for name, value in bound.arguments.items():
            wanted = hints.get(name)
            if wanted is None:
                continue
            kind = self.signature.parameters[name].kind
            items: list[tuple[Any, Any]]
            if kind is inspect.Parameter.VAR_POSITIONAL:
                items = list(enumerate(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                items = list(value.items())
            else:
                items = [(None, value)]
            for key, item in items:
                problem = _problem(wanted, item)
                if problem is not None:
                    where = name if key is None else f"{name}[{key!r}]"
                    raise EnqueueError(
                        f"{self.name}: argument {where!r} must be {_type_name(wanted)}, "
                        f"not {type(item).__name__} {_short(item)}: {problem}"
                    )

    def hints(self) -> dict[str, Any]:
        """The resolved annotations (empty if they cannot be resolved)."""
        if self._hints is None:
            try:
                self._hints = typing.get_type_hints(self._fn)
            except Exception:  # (a name only a type checker sees: nothing to check against)
                self._hints = _NO_HINTS
        return self._hints

    # -- in the worker ----------------------------------------------------------------------

    def rebuilt(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments with dataclasses and pydantic models rebuilt from their fields
        (as they came if they do not bind: the call then fails as it would have)."""
        rebuilds = self._plan()[0]
        if not rebuilds:
            return args, kwargs
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return args, kwargs
        for name, rebuild in rebuilds.items():
            if name in bound.arguments:
                bound.arguments[name] = self._rebuild_one(name, rebuild, bound.arguments[name])
        return bound.args, bound.kwargs

    def _rebuild_one(self, name: str, rebuild: Rebuild, value: Any) -> Any:
        """Raises TypeError naming the parameter if its fields do not make its type."""
        kind = self.signature.parameters[name].kind
        try:
            if kind is inspect.Parameter.VAR_POSITIONAL:
                return tuple(rebuild(v) for v in value)
            if kind is inspect.Parameter.VAR_KEYWORD:
                return {k: rebuild(v) for k, v in value.items()}
            return rebuild(value)
        except (TypeError, ValueError) as exc:  # (pydantic's ValidationError is a ValueError)
            wanted = _type_name(self.hints()[name])
            raise TypeError(f"argument {name!r} cannot be rebuilt as {wanted}: {exc}") from None

    def result(self, value: Any) -> Any:
        """A decoded return value rebuilt as its annotation says."""
        rebuild = self._plan()[1]
        return value if rebuild is None else rebuild(value)

    def _plan(self) -> tuple[dict[str, Rebuild], Rebuild | None]:
        """The parameters to rebuild (by name) and the return value's rebuild, if any."""
        if self._rebuilds is None:
            hints = self.hints()
            params = {p.name: rebuilder(hints[p.name]) for p in self._params if p.name in hints}
            returns = rebuilder(hints["return"]) if "return" in hints else None
            self._rebuilds = ({k: r for k, r in params.items() if r is not None}, returns)
            self.rebuilds_args = bool(self._rebuilds[0])
        return self._rebuilds


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _is_model(cls: Any) -> bool:
    """A pydantic model class (pydantic loaded already: nothing is imported to tell)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


def rebuilder(annotation: Any) -> Rebuild | None:
    """What turns a decoded value into ``annotation``'s dataclasses and pydantic models,
    directly or inside an Optional, a union, a list, tuple, set or dict; None when the
    annotation holds none (the value is used as it came)."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _dataclass_rebuilder(annotation)
    if _is_model(annotation):
        return _model_rebuilder(annotation)
    origin, params = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return rebuilder(params[0])
    if origin is typing.Union or origin is types.UnionType:
        return _union_rebuilder(params)
    if origin in (list, set, frozenset, tuple) or _is_abc(origin, "Sequence", "Set"):
        return _items_rebuilder(origin, params)
    if origin is dict or _is_abc(origin, "Mapping"):
        inner = rebuilder(params[1]) if len(params) == 2 else None
        if inner is None:
            return None
        return lambda v: {k: inner(x) for k, x in v.items()} if isinstance(v, dict) else v
    return None


def _is_abc(origin: Any, *names: str) -> bool:
    return any(origin is getattr(collections.abc, n) for n in names)


def _dataclass_rebuilder(cls: type) -> Rebuild:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    inner: dict[str, Rebuild | None] | None = None

    def rebuild(value: Any) -> Any:
        nonlocal inner
        if not isinstance(value, dict):
            return value
        if inner is None:  # (on first use: a field's class may be defined after this one)
            hints = typing.get_type_hints(cls)
            inner = {f.name: rebuilder(hints.get(f.name)) for f in fields}
        return cls(**{
            name: (r(value[name]) if (r := inner[name]) is not None else value[name])
            for name in (f.name for f in fields) if name in value
        })  # fmt: skip

    return rebuild


def _model_rebuilder(cls: Any) -> Rebuild:
    return lambda v: cls.model_validate(v) if isinstance(v, dict) else v


def _union_rebuilder(members: tuple[Any, ...]) -> Rebuild | None:
    """The first member that rebuilds a map (a union of two dataclasses cannot tell them
    apart from their fields: the first wins)."""
    for member in members:
        rebuild = rebuilder(member)
        if rebuild is not None:
            return rebuild
    return None


def _items_rebuilder(origin: Any, params: tuple[Any, ...]) -> Rebuild | None:
    if origin is tuple and not (len(params) == 2 and params[1] is Ellipsis):
        each = [rebuilder(p) for p in params]
        if not any(each):
            return None
        return lambda v: tuple(r(x) if r else x for r, x in zip(each, v, strict=False))
    inner = rebuilder(params[0]) if params else None
    if inner is None:
        return None
    kind = origin if origin in (list, set, frozenset, tuple) else None
    return lambda v: (
        (kind or type(v))(inner(x) for x in v)
        if isinstance(v, list | tuple | set | frozenset)
        else v
    )


# -- validation ---------------------------------------------------------------------------


def _problem(wanted: Any, value: Any) -> str | None:
    """Why ``value`` does not fit ``wanted`` (None: it does)."""
    adapter = _adapter(wanted)
    if adapter is None:
        return conforms(value, wanted)
    pydantic = sys.modules["pydantic"]
    if isinstance(value, pydantic.BaseModel):  # (an instance is not checked again otherwise)
        value = value.model_dump(by_alias=True, warnings=False)
    try:
        adapter.validate_python(value, strict=True)
    except pydantic.ValidationError as exc:
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()
        )
    return None


_adapters: dict[Any, Any] = {}


def _adapter(wanted: Any) -> Any:
    """pydantic's TypeAdapter for an annotation, if pydantic is installed and takes it."""
    try:
        return _adapters[wanted]
    except KeyError:
        pass
    except TypeError:  # (an unhashable annotation: made each time)
        return _new_adapter(wanted)
    adapter = _adapters[wanted] = _new_adapter(wanted)
    return adapter


def _new_adapter(wanted: Any) -> Any:
    try:
        import pydantic
    except ImportError:
        return None
    try:
        return pydantic.TypeAdapter(wanted)
    except Exception:  # (a class pydantic has no schema for: the built-in check takes it)
        return None


def conforms(value: Any, wanted: Any) -> str | None:
    """The built-in check (without pydantic): classes by ``isinstance`` (an int is a
    float), Optional and unions, Literal, Annotated, and the items of lists, tuples,
    sets and dicts; a dataclass by its type or, as a map, by its fields. Anything else
    passes. Returns why the value does not fit, or None."""
    if wanted is Any or wanted is object:
        return None
    if wanted is None or wanted is type(None):
        return None if value is None else "not None"
    origin, params = typing.get_origin(wanted), typing.get_args(wanted)
    if origin is typing.Annotated:
        return conforms(value, params[0])
    if origin is typing.Union or origin is types.UnionType:
        fits = any(conforms(value, p) is None for p in params)
        return None if fits else f"none of {_type_name(wanted)}"
    if origin is typing.Literal:
        return None if value in params else f"not one of {params!r}"
    if origin is not None:
        return _conforms_generic(value, origin, params)
    if not isinstance(wanted, type):
        return None  # (a TypeVar, a string annotation: nothing to check against)
    return _conforms_class(value, wanted)


def _conforms_class(value: Any, wanted: type) -> str | None:
    if wanted is float and isinstance(value, int) and not isinstance(value, bool):
        return None
    if isinstance(value, wanted):
        return None
    if dataclasses.is_dataclass(wanted) and isinstance(value, dict):
        hints = typing.get_type_hints(wanted)
        for f in dataclasses.fields(wanted):
            if f.name in value:
                problem = conforms(value[f.name], hints.get(f.name, Any))
                if problem is not None:
                    return f"{f.name}: {problem}"
            elif f.init and f.default is f.default_factory is dataclasses.MISSING:
                return f"{f.name}: missing"
        return None
    return f"not a {wanted.__name__}"


def _conforms_generic(value: Any, origin: Any, params: tuple[Any, ...]) -> str | None:
    if not isinstance(origin, type):
        return None
    if not isinstance(value, origin):
        return f"not a {origin.__name__}"
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = (conforms(key, params[0]) or conforms(item, params[1])) if params else None
            if problem is not None:
                return f"[{key!r}]: {problem}"
        return None
    items = list(typing.cast(Iterable[Any], value))
    if origin is tuple and params and not (len(params) == 2 and params[1] is Ellipsis):
        if len(items) != len(params):
            return f"{len(items)} items, not {len(params)}"
        wanted = list(params)
    else:
        wanted = [params[0]] * len(items) if params else [Any] * len(items)
    for i, (item, kind) in enumerate(zip(items, wanted, strict=True)):
        problem = conforms(item, kind)
        if problem is not None:
            return f"[{i}]: {problem}"
    return None


def _type_name(wanted: Any) -> str:
    return wanted.__name__ if isinstance(wanted, type) else str(wanted).replace("typing.", "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
