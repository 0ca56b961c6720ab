"""The manual's references, generated from the code that they describe (never written twice).

- `cli_reference(parser)`: every command of `polymath-host`, from its argparse parsers: usage,
  description, every option with its help, choices and default.
- `http_reference(document)`: every operation of the host's OpenAPI document (what `/openapi.json`
  serves): its parameters, request bodies with their constraints, and the statuses it answers.
- `access_file_reference()`: the fields of `access.SECRET.json` as its loader knows them, with the
  line the loader answers when a field holds the wrong kind of value.

Functions take data and return Markdown; `hooks.py` puts the Markdown into the pages at build time.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from typing import Any

# ---- the command line ------------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, name: str = "") -> Iterator[tuple[str, argparse.ArgumentParser,
                                                                                list[str]]]:
    """(full command name, its parser, its aliases) for the parser and every subcommand, depth first.
    An alias (`build` for `compile`) is the same parser object: it is listed once, with its aliases."""
    name = name or parser.prog
    yield name, parser, []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        seen: dict[int, tuple[str, list[str]]] = {}
        for sub_name, sub_parser in action.choices.items():
            if id(sub_parser) in seen:
                seen[id(sub_parser)][1].append(sub_name)
            else:
                seen[id(sub_parser)] = (sub_name, [])
        for sub_name, sub_parser in action.choices.items():
            first, aliases = seen[id(sub_parser)]
            if first != sub_name:
                continue
            for full, nested, nested_aliases in commands(sub_parser, f"{name} {sub_name}"):
                yield full, nested, (aliases if nested is sub_parser else nested_aliases)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's arguments and options, without -h and the subcommands' own list."""
    return [action for action in parser._actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)]


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help is None or action.help == argparse.SUPPRESS:
        return ""
    # argparse's own expansion: %(default)s, %(prog)s, %(choices)s as `--help` shows them.
    formatter = parser._get_formatter()
    return " ".join(formatter._expand_help(action).split())


def _option_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    if action.nargs == 0:
        return ", ".join(f"`{option}`" for option in action.option_strings)
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                 else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return ", ".join(f"`{option} {metavar}`" for option in action.option_strings)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown: one section per command, its usage as `--help` prints it, and a table of its options."""
    out: list[str] = []
    for name, command, aliases in commands(parser):
        depth = name.count(" ")
        out.append(f"{'#' * min(depth + 2, 4)} `{name}` {{#{_anchor(name)}}}\n")
        if aliases:
            parent = name.rpartition(" ")[0]
            out.append("Also: " + ", ".join(f"`{parent} {alias}`" for alias in aliases) + ".\n")
        if command.description:
            out.append(" ".join(command.description.split()) + "\n")
        out.append("```text\n" + command.format_usage().strip() + "\n```\n")
        rows = [(action, _help_text(command, action)) for action in options(command)]
        if rows:
            out.append("| argument | what it does | default |\n|---|---|---|")
            for action, help_text in rows:
                default = action.default
                shown = "" if default in (None, argparse.SUPPRESS, False) or action.nargs == 0 else f"`{default}`"
                choices = f" One of: {', '.join(f'`{c}`' for c in action.choices)}." if action.choices else ""
                repeat = " Repeatable." if isinstance(action, argparse._AppendAction) else ""
                out.append(f"| {_option_name(action)} | {_cell(help_text)}{choices}{repeat} | {_cell(shown)} |")
            out.append("")
        subcommands = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subcommands:
            out.append("| command | what it does |\n|---|---|")
            first_names: dict[int, str] = {}
            for sub_name, sub_parser in action.choices.items():
                first_names.setdefault(id(sub_parser), sub_name)
            for choice in action._choices_actions:
                target = f"{name} {first_names[id(action.choices[choice.dest])]}"  # an alias leads to its command
                out.append(f"| [`{name} {choice.dest}`](#{_anchor(target)}) | {_cell(choice.help or '')} |")
            out.append("")
        if command.epilog:
            out.append("```text\n" + command.epilog.strip() + "\n```\n")
    return "\n".join(out)


# ---- the HTTP API ----------------------------------------------------------------------------------

_CONSTRAINTS = (("minimum", "at least {}"), ("maximum", "at most {}"), ("exclusiveMinimum", "more than {}"),
                ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
                ("minItems", "at least {} items"), ("maxItems", "at most {} items"), ("pattern", "matches `{}`"))


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a `$ref` names (components only), or the schema itself."""
    while "$ref" in schema:
        name = schema["$ref"].rpartition("/")[2]
        schema = document["components"]["schemas"][name]
    return schema


def describe_type(document: dict[str, Any], schema: dict[str, Any]) -> str:
    """A schema's type in a few words: `integer`, `array of string`, `string or array of string`."""
    schema = resolve(document, schema)
    for key in ("oneOf", "anyOf"):
        if key in schema:
            kinds = " or ".join(dict.fromkeys(describe_type(document, option) for option in schema[key]))
            return kinds + (" or null" if schema.get("nullable") and "null" not in kinds else "")
    if "enum" in schema and "type" not in schema:
        return " or ".join("null" if value is None else json.dumps(value) for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        kind = f"array of {describe_type(document, schema.get('items', {}))}"
    if schema.get("format") in ("byte", "binary"):
        kind += f" ({'base64' if schema['format'] == 'byte' else 'bytes'})"
    if schema.get("nullable"):
        kind += " or null"
    return kind


def readable_pattern(pattern: str) -> str:
    """A pattern as a reader takes it in: the host's spelled-out classes of spaces as `\\s` and `\\S`."""
    from host.web.dialects.openapi_paths import NOT_SPACE, SPACE

    number_space = SPACE.replace("\\x1c-\\x1f", "")
    return pattern.replace(NOT_SPACE, "\\S").replace(SPACE, "\\s").replace(number_space, "\\s")


def describe_constraints(schema: dict[str, Any]) -> str:
    parts = [template.format(readable_pattern(schema[key]) if key == "pattern" else schema[key])
             for key, template in _CONSTRAINTS if key in schema]
    if "enum" in schema and "type" in schema:
        parts.append("one of " + ", ".join(f"`{json.dumps(value)}`" for value in schema["enum"]))
    if "maxProperties" in schema:
        parts.append(f"at most {schema['maxProperties']} fields")
    for key in ("anyOf", "oneOf"):
        options = [(describe_type({}, option) if "$ref" not in option else "", describe_constraints(option))
                   for option in schema.get(key, []) if isinstance(option, dict)]
        if any(constraints for _, constraints in options):
            parts.append(" or ".join(f"{kind}: {constraints}" if constraints else kind for kind, constraints in options))
    if "default" in schema:
        parts.append(f"default `{json.dumps(schema['default'])}`")
    if schema.get("additionalProperties") is False:
        parts.append("no other keys")
    return "; ".join(parts)


def fields(document: dict[str, Any], schema: dict[str, Any], prefix: str = "",
           depth: int = 0) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(dotted name, schema, required) for every property of an object schema, nested objects' too."""
    schema = resolve(document, schema)
    required = set(schema.get("required", []))
    for name, field in schema.get("properties", {}).items():
        field = resolve(document, field)
        yield prefix + name, field, name in required
        if depth < 3 and field.get("type") == "object" and field.get("properties"):
            yield from fields(document, field, f"{prefix}{name}.", depth + 1)


def _fields_table(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    schema = resolve(document, schema)
    rows = list(fields(document, schema))
    if not rows:
        return [f"{describe_type(document, schema)}. {describe_constraints(schema)}".strip() + "\n"]
    out = ["| field | type | required | constraints | description |", "|---|---|---|---|---|"]
    for name, field, required in rows:
        out.append(f"| `{name}` | {_cell(describe_type(document, field))} | {'yes' if required else ''} "
                   f"| {_cell(describe_constraints(field))} | {_cell(field.get('description', ''))} |")
    if schema.get("additionalProperties") is False:
        out.append("\nNo other keys: an unknown key is refused.")
    return [*out, ""]


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def http_reference(document: dict[str, Any]) -> str:
    """Markdown: an index of every operation, then each one's parameters, bodies and answers."""
    out = ["| operation | what it is |", "|---|---|"]
    for path, method, operation in operations(document):
        title = f"{method.upper()} {path}"
        out.append(f"| [`{title}`](#{_anchor(title)}) | {_cell(operation.get('summary', ''))} |")
    out.append("")
    for path, method, operation in operations(document):
        title = f"{method.upper()} {path}"
        out.append(f"### `{title}` {{#{_anchor(title)}}}\n")
        out.append(operation.get("summary", "") + "\n")
        if operation.get("description"):
            out.append(" ".join(operation["description"].split()) + "\n")
        parameters = operation.get("parameters", [])
        if parameters:
            out.append("| parameter | in | type | required | constraints | description |\n|---|---|---|---|---|---|")
            for parameter in parameters:
                schema = parameter.get("schema", {})
                out.append(f"| `{parameter['name']}` | {parameter['in']} | {_cell(describe_type(document, schema))} "
                           f"| {'yes' if parameter.get('required') else ''} | {_cell(describe_constraints(schema))} "
                           f"| {_cell(parameter.get('description', ''))} |")
            out.append("")
        body = operation.get("requestBody")
        if body:
            media = body.get("content", {})
            required = " (required)" if body.get("required") else ""
            out.append(f"**Body**{required}: {', '.join(f'`{m}`' for m in media)}\n")
            shown: list[set[str]] = []
            for name, content in media.items():
                schema = resolve(document, content.get("schema", {}))
                names = set(schema.get("properties", {}))
                if names and names in shown:  # a form of the same arguments: said in a line
                    more = describe_constraints({key: value for key, value in schema.items() if key == "maxProperties"})
                    out.append(f"As `{name}`: the same fields, as text{'; ' + more if more else ''}.\n")
                    continue
                shown.append(names)
                if schema.get("description"):
                    out.append(" ".join(schema["description"].split()) + "\n")
                out.extend(_fields_table(document, schema))
        out.append("| status | meaning | content |\n|---|---|---|")
        for status, response in operation.get("responses", {}).items():
            content = ", ".join(f"`{m}`" for m in response.get("content", {}))
            out.append(f"| {status} | {_cell(response.get('description', ''))} | {content} |")
        out.append("")
    return "\n".join(out)


# ---- the access file -------------------------------------------------------------------------------

# Values of each JSON kind, tried in turn on a field until the loader refuses one: its line is the example.
_WRONG_VALUES: tuple[Any, ...] = (12345, "not-a-list", ["a", 1], {"unexpected": True}, "", None)


def _refusal(build: Any) -> str:
    """The loader's one line for the first wrong value it refuses in the shape `build(value)` makes."""
    from access.config import parse_settings
    from access.errors import AccessConfigError

    for value in _WRONG_VALUES:
        try:
            parse_settings(build(value), "access.SECRET.json")
        except AccessConfigError as problem:
            return str(problem)
    return ""


def access_file_reference() -> str:
    """Markdown: each field of the access file as `access/config.py` reads it, with a refusal of each."""
    from access import config

    sections: list[tuple[str, tuple[str, ...], Any]] = [
        ("the file", config.TOP_LEVEL_FIELDS, lambda field: lambda value: {field: value}),
        ("`restricted`", config._RESTRICTED_FIELDS, lambda field: lambda value: {"restricted": {field: value}}),
        ("each entry of `tokens`", config._LEGACY_TOKEN_FIELDS,
         lambda field: lambda value: {"tokens": {"name": {"token": "x", field: value}}}),
        ("each entry of `issued`", config._ISSUED_FIELDS,
         lambda field: lambda value: {"issued": [{**_ISSUED_EXAMPLE, field: value}]}),
    ]
    out = []
    for title, names, shape in sections:
        out.append(f"**Fields of {title}** (any other is refused):\n")
        out.append("| field | what the loader says of a wrong value |\n|---|---|")
        for name in names:
            out.append(f"| `{name}` | {_cell(_refusal(shape(name)) or '(every value tried was accepted)')} |")
        out.append("")
    out.append("**Unknown fields** are refused too: `" + _refusal(lambda value: {"revokd": value}) + "`\n")
    out.append(_keys_table())
    return "\n".join(out)


def _keys_table() -> str:
    """Each entry of `keys`, by algorithm, as `access/keys.py` checks it."""
    from access import keys

    out = ["**Fields of each entry of `keys`**, by its `alg` (the last key signs new tokens; every key verifies):\n",
           "| `alg` | required | may also hold |", "|---|---|---|"]
    for alg, (required, allowed) in keys._FIELDS.items():
        optional = sorted(allowed - required)
        out.append(f"| `{alg}` | {', '.join(f'`{f}`' for f in sorted(required))} "
                   f"| {', '.join(f'`{f}`' for f in optional) or ''} |")
    refusals = [_refusal(lambda value: {"keys": [value]}),
                _refusal(lambda value: {"keys": [{"kid": "k", "alg": value}]}),
                _refusal(lambda value: {"keys": [{"kid": "k", "alg": "HS256", "secret": value}]}),
                _refusal(lambda value: {"keys": [{"kid": "k", "alg": "EdDSA", "public_key": value}]})]
    out.append("\nWhat the loader says of a few wrong keys:\n")
    out.extend(f"- `{line}`" for line in refusals if line)
    return "\n".join(out) + "\n"


_ISSUED_EXAMPLE = {"jti": "0" * 32, "sub": "alice", "access_tags": ["unpublished"], "iat": 1, "exp": 2, "kid": "k"}
