"""Option values coerced without pydantic where typer would build a pydantic adapter for nothing.

typer (0.26 and later) coerces every command parameter through a pydantic ``TypeAdapter``,
built when the command runs: importing pydantic and building the adapters took about 0.35 s of
a 0.9 s ``afc queue stats``. Most of afc's options are plain text (``--ledger``, ``--batch``)
or carry no value at all (an unset ``--storage``), where the adapter does nothing typer could
not do itself. ``install()`` makes typer's ``build_runtime_param`` return ``LightParam``:

- a plain ``str`` option (no parser, no path checks, no choices) is coerced as typer's own
  adapter does it: text stays text; a repeated ``list[str]`` option (``--fail-if``) becomes
  the list of its texts;
- a plain ``int`` or ``float`` option (``--concurrency``, ``--grace``, ``--poll``) whose value
  is a number already (its default) or plain decimal digits (``500``, ``2.5``), within the
  option's ``min``/``max``, becomes the number pydantic's adapter would make of it
  (``int("500")``, ``float(30)``). Anything else (a sign, an exponent, ``1_000``, a value out
  of range, a clamped option) goes to typer's adapter, so its answer and its message are
  typer's. Every command with such an option (submit, resume, worker) paid for pydantic's
  adapters for its defaults alone: ~0.1 s of a submit, where the manifest's models import
  pydantic anyway, and ~0.25 s of a resume or a worker, which need no pydantic otherwise;
- any other type (list, choices, paths), and any int or float value the item above leaves
  out, is handed to typer's own runtime param, built on the first value that needs it, so
  its checks and messages are typer's;
- a value that is not given (None) never reaches either: typer's ``RuntimeParam.coerce`` returns
  it before coercion, so an unset ``--concurrency`` builds no adapter.

It reaches into typer's private ``_coercion`` module; with a typer that lacks it, ``install``
does nothing and typer works as it ships (tests/test_issue15_readpath.py checks both the
speed-up and the messages of bad values).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any


def install() -> bool:
    """Route typer's runtime coercion through ``LightParam``; False if this typer has no such
    hook (then nothing is changed)."""
    try:
        import typer.core as core
        from typer._coercion import RuntimeParam, TypeDescriptor
    except ImportError:  # pragma: no cover - another typer
        return False
    original = getattr(core, "build_runtime_param", None)
    if original is None or getattr(original, "_afc_light", False):
        return original is not None
    # the private shapes this relies on; a typer that changed them keeps its own coercion
    fields = getattr(RuntimeParam, "__dataclass_fields__", {})
    if not (
        {"parameter_info", "annotation"} <= set(fields)
        and callable(getattr(RuntimeParam, "_coerce_value", None))
    ):
        return False

    @dataclass(frozen=True)
    class LightParam(RuntimeParam):  # type: ignore[misc, valid-type]
        descriptor: Any = None
        _built: list[Any] = field(default_factory=list, compare=False)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            plain = _plain_text(self.descriptor)
            if plain == "str" and isinstance(value, str):
                return value
            if (
                plain == "list"
                and isinstance(value, list | tuple)
                and all(isinstance(item, str) for item in value)
            ):
                return list(value)
            if plain in ("int", "float"):
                number = _plain_number(plain, value, self.descriptor.parameter_info)
                if number is not None:
                    return number
            if not self._built:
                self._built.append(original(self.descriptor))
            return self._built[0]._coerce_value(value, param=param, ctx=ctx)

    def build(descriptor: TypeDescriptor) -> Any:
        try:
            return LightParam(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
            )
        except (TypeError, AttributeError):  # a typer whose runtime params differ
            return original(descriptor)

    build._afc_light = True  # type: ignore[attr-defined]
    core.build_runtime_param = build
    return True


def _plain_text(descriptor: Any) -> str | None:
    """``"str"`` for a ``str`` parameter and ``"list"`` for a ``list[str]`` one that typer's
    adapter would only pass through (its ``_parse_cli_str`` returns text as it is), ``"int"``
    and ``"float"`` for plain numbers (``_plain_number``), else None."""
    from typing import get_args, get_origin

    info = descriptor.parameter_info
    if (
        descriptor.file_annotation is not None
        or getattr(info, "parser", None) is not None
        or descriptor.is_path
        or descriptor.is_choice
    ):
        return None
    annotation = descriptor.annotation
    if annotation is str:
        return "str"
    if annotation in (int, float) and not getattr(info, "clamp", False):
        return annotation.__name__
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        return "list"
    return None


_INT = re.compile(r"(?:0|[1-9][0-9]{0,14})")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


def _plain_number(kind: str, value: Any, info: Any) -> int | float | None:
    """``value`` as the ``int`` or ``float`` typer's adapter would make of it, when that is
    beyond doubt: a number already (not a bool; a float finite, an int to a float exact), or
    plain ASCII decimal digits with at most one point (a float's) and no sign; within the
    option's ``min`` and ``max`` (inclusive, as the adapter's ``ge``/``le``). None otherwise:
    typer's adapter decides, and words its refusal."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not (_INT if kind == "int" else _FLOAT).fullmatch(value):
            return None
        number: int | float = int(value) if kind == "int" else float(value)
    elif kind == "int" and isinstance(value, int):
        number = value
    elif kind == "float" and isinstance(value, float) and math.isfinite(value):
        number = value
    elif kind == "float" and isinstance(value, int) and abs(value) < 2**53:
        number = float(value)  # exactly
    else:
        return None
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if (low is not None and number < low) or (high is not None and number > high):
        return None
    return number
