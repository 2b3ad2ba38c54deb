"""Option values coerced without pydantic where typer would build a pydantic adapter for nothing.

typer (0.26 and later) coerces every command parameter through a pydantic ``TypeAdapter``,
built when the command runs: importing pydantic and building the adapters took about 0.35 s of
a 0.9 s ``afc queue stats``. Most of afc's options are plain text (``--ledger``, ``--batch``)
or carry no value at all (an unset ``--storage``), where the adapter does nothing typer could
not do itself. ``install()`` makes typer's ``build_runtime_param`` return ``LightParam``:

- a plain ``str`` option (no parser, no path checks, no choices) is coerced as typer's own
  adapter does it: text stays text; a repeated ``list[str]`` option (``--fail-if``) becomes
  the list of its texts;
- any other type (int, float, list, choices, paths) is handed to typer's own runtime param,
  built on the first value that needs it, so its checks and messages are typer's;
- a value that is not given (None) never reaches either: typer's ``RuntimeParam.coerce`` returns
  it before coercion, so an unset ``--concurrency`` builds no adapter.

It reaches into typer's private ``_coercion`` module; with a typer that lacks it, ``install``
does nothing and typer works as it ships (tests/test_issue15_readpath.py checks both the
speed-up and the messages of bad values).
"""

from __future__ import annotations

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
    adapter would only pass through (its ``_parse_cli_str`` returns text as it is), else
    None."""
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
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        return "list"
    return None
