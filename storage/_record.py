"""Light records: the data classes of the start-up pass without `dataclasses`' import cost.

``@dataclass`` writes the source of every class's methods and compiles it when the module is
imported; the ADR-0068 pass imports some twenty of them before its first candidate, and as
standard dataclasses they cost the 256-candidate pass 8 % more instructions
(``benchmarks/README.md``). ``@record`` gives those classes the same constructor (positional or
keyword, with defaults and default factories), equality (same class, same field values), hash
(frozen classes), repr, immutability (frozen) and ``__slots__`` (``slots=True``) from ONE shared
implementation, compiled once into this module's bytecode.

The type checker reads ``record`` itself: it is declared a dataclass transform (PEP 681), so
every constructor call and every assignment to a frozen field is checked against THIS
decorator, not against a stand-in. What a record is not: a ``dataclasses`` class
(``dataclasses.replace``/``fields``/``asdict`` do not apply; the classes that need those stay
dataclasses).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

# `typing` is loaded before any record is: the pass imports `transitions`, the wrapper and the
# launcher their lock module; the zero-candidate start-up imports no record at all.
from typing import Any, TypeVar, cast, dataclass_transform, overload

C = TypeVar("C", bound=type)
T = TypeVar("T")

_MISSING = object()
_set = object.__setattr__


class FrozenRecordError(AttributeError):
    """A field of a frozen record was assigned (as ``dataclasses.FrozenInstanceError``)."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], object]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is made anew for each record (``dataclasses.field``'s form)."""
    # The class body holds the marker; the record makes the value (the type is the value's).
    return cast(T, _Factory(default_factory))


# The public name of ``field`` outside ``storage`` (``storage.record_field``).
record_field = field


@overload
def record(cls: C, /) -> C: ...


@overload
def record(*, frozen: bool = False, slots: bool = False) -> Callable[[C], C]: ...


@dataclass_transform(field_specifiers=(field,))
def record(cls: C | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """``@record``, ``@record(frozen=True)``, ``@record(frozen=True, slots=True)``."""

    def wrap(cls: C) -> C:
        return _build(cls, frozen, slots)

    return wrap if cls is None else wrap(cls)


def _bind(
    cls: type,
    names: tuple[str, ...],
    defaults: dict[str, Any],
    args: Sequence[object],
    kwargs: dict[str, object],
) -> list[object]:
    # The constructor's slow path (keywords or defaults), with dataclasses' error messages.
    given = len(args)
    if given + len(kwargs) == len(names):
        # Every later field by keyword (the usual call): nothing to default, nothing unknown.
        try:
            return [*args, *[kwargs[name] for name in names[given:]]]
        except KeyError:
            pass
    if len(args) > len(names):
        raise TypeError(
            f"{cls.__qualname__}.__init__() takes {len(names) + 1} positional arguments but "
            f"{len(args) + 1} were given"
        )
    values = list(args)
    for name in names[len(args) :]:
        if name in kwargs:
            values.append(kwargs.pop(name))
            continue
        default = defaults.get(name, _MISSING)
        if default is _MISSING:
            raise TypeError(
                f"{cls.__qualname__}.__init__() missing 1 required positional argument: {name!r}"
            )
        values.append(default.make() if isinstance(default, _Factory) else default)
    for name in kwargs:
        if name in names:
            raise TypeError(
                f"{cls.__qualname__}.__init__() got multiple values for argument {name!r}"
            )
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {name!r}"
        )
    return values


def _build(cls: C, frozen: bool, slots: bool) -> C:
    # The class's own annotations, in order (not inspect.get_annotations: no `inspect` here).
    names = tuple(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    count = len(names)
    if count == 0:
        key: Callable[[object], tuple[object, ...]] = lambda self: ()  # noqa: E731
    elif count == 1:
        only = names[0]
        key = lambda self: (getattr(self, only),)  # noqa: E731
    else:
        key = attrgetter(*names)

    if slots:

        def __init__(self: object, *args: object, **kwargs: object) -> None:
            values = (
                args
                if len(args) == count and not kwargs
                else _bind(type(self), names, defaults, args, kwargs)
            )
            # As many values as names: the length is checked above or bound by _bind.
            for name, value in zip(names, values):  # noqa: B905
                _set(self, name, value)

    else:

        def __init__(self: object, *args: object, **kwargs: object) -> None:
            values = (
                args
                if len(args) == count and not kwargs
                else _bind(type(self), names, defaults, args, kwargs)
            )
            self.__dict__.update(zip(names, values))  # noqa: B905 - as above

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(key(self) == key(other))
        return NotImplemented

    def __repr__(self: object) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{type(self).__qualname__}({shown})"

    methods: dict[str, object] = {
        "__init__": __init__,
        "__eq__": __eq__,
        "__match_args__": names,
    }
    if "__repr__" not in cls.__dict__:
        methods["__repr__"] = __repr__
    if frozen:

        def __hash__(self: object) -> int:
            return hash(key(self))

        def __setattr__(self: object, name: str, value: object) -> None:
            raise FrozenRecordError(f"cannot assign to field {name!r}")

        def __delattr__(self: object, name: str) -> None:
            raise FrozenRecordError(f"cannot delete field {name!r}")

        methods.update(__hash__=__hash__, __setattr__=__setattr__, __delattr__=__delattr__)
    else:
        methods["__hash__"] = None  # as dataclasses: mutable and compared by value
    for method in methods.values():
        if callable(method):
            named: Any = method
            named.__qualname__ = f"{cls.__qualname__}.{named.__name__}"
    if slots:
        body = {
            k: v
            for k, v in cls.__dict__.items()
            if k not in names and k not in ("__dict__", "__weakref__")
        }
        body.update(methods, __slots__=names)
        built = type(cls)(cls.__name__, cls.__bases__, body)
        built.__qualname__ = cls.__qualname__
        return built
    for name, default in defaults.items():
        if isinstance(default, _Factory):
            delattr(cls, name)  # made per record, never shared through the class
    for name, method in methods.items():
        setattr(cls, name, method)
    return cls
