"""request/body.py: validation by field path, the facts we read, byte-exact model rewrite."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.errors import InvalidRequest
from data_plane.request import body as body_module
from data_plane.request.body import (
    MAX_DEPTH,
    BodyKind,
    ParsedBody,
    _model_value_spans,
    _scanned_model_value_spans,
    parse_request_body,
    rewrite_model,
    validated_facts,
)
from data_plane.request.fields import chat_facts, completion_facts
from data_plane.request.prompt_size import IMAGE_CHARS


def _raw(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_chat_facts_use_last_user_turn_and_count_every_turn() -> None:
    system = "You are a meticulous assistant. " * 50
    body = {
        "model": "auto",
        "stream": True,
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hello"},
                    {"type": "image_url", "image_url": {"url": "data:..."}},
                    {"type": "text", "text": "there"},
                ],
            },
        ],
        "temperature": 0.2,
        "unknown_field": {"kept": True},
    }
    parsed = parse_request_body(_raw(body), "chat")
    assert parsed == ParsedBody(
        alias="auto",
        stream=True,
        max_output_tokens=64,
        wants_json=False,
        classify_text="hello\nthere",
        input_chars=len(system)
        + len("first question")
        + len("hello\nthere")
        + len(json.dumps([{"id": "1"}]))  # the assistant's tool_calls, as rendered
        + IMAGE_CHARS,  # the image part
        json_chars=len(json.dumps([{"id": "1"}])),  # JSON: the tool_calls, not the image
        images=1,  # priced at the table's tokens per image (`request_facts`)
        messages=4,  # each adds the chat template's turn markers, where measured
    )


def test_chat_without_user_turn_classifies_nothing() -> None:
    parsed = parse_request_body(
        _raw({"model": "m", "messages": [{"role": "system", "content": "be brief"}]}), "chat"
    )
    assert parsed.classify_text == ""
    assert parsed.input_chars == len("be brief")
    assert parsed.stream is False
    assert parsed.max_output_tokens is None


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"max_tokens": 10}, 10),
        ({"max_completion_tokens": 20}, 20),
        ({"max_tokens": 10, "max_completion_tokens": 20}, 20),
        ({"max_tokens": None}, None),
    ],
)
def test_max_output_tokens(extra: dict[str, Any], expected: int | None) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], **extra}
    assert parse_request_body(_raw(body), "chat").max_output_tokens == expected


@pytest.mark.parametrize(
    ("fmt", "wants"),
    [
        ({"type": "json_object"}, True),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}, True),
        ({"type": "text"}, False),
        (None, False),
    ],
)
def test_wants_json(fmt: dict[str, Any] | None, wants: bool) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": fmt}
    assert parse_request_body(_raw(body), "chat").wants_json is wants


@pytest.mark.parametrize(
    ("prompt", "text", "chars"),
    [("once upon", "once upon", 9), (["a", "bc"], "a\nbc", 3)],
)
def test_completions(prompt: str | list[str], text: str, chars: int) -> None:
    parsed = parse_request_body(
        _raw({"model": "fam", "prompt": prompt, "stream": False}), "completions"
    )
    assert (parsed.alias, parsed.classify_text, parsed.input_chars) == ("fam", text, chars)


_MSG = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("kind", "raw", "code", "param", "words"),
    [
        ("chat", b"", "invalid_json", None, "empty"),
        ("chat", b"   \n", "invalid_json", None, "empty"),
        ("chat", b'{"model": "\xff"}', "invalid_json", None, "UTF-8"),
        ("chat", b'{"model": ', "invalid_json", None, "not valid JSON"),
        ("chat", b'{"model": "m", "x": NaN}', "invalid_json", None, "NaN"),
        ("chat", b'{"model": "m", "x": -Infinity}', "invalid_json", None, "Infinity"),
        ("chat", b"[1, 2]", "invalid_json", None, "JSON object, not list"),
        ("chat", b'"text"', "invalid_json", None, "not str"),
        ("chat", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "invalid_json", None, "deeper"),
        ("chat", b"[" * 100_000, "invalid_json", None, "deeper"),
        ("chat", _raw({"messages": _MSG}), "invalid_field", "model", "required"),
        ("chat", _raw({"model": 5, "messages": _MSG}), "invalid_field", "model", "string"),
        ("chat", _raw({"model": "", "messages": _MSG}), "invalid_field", "model", "at least 1"),
        ("chat", _raw({"model": "m"}), "invalid_field", "messages", "required"),
        ("chat", _raw({"model": "m", "messages": []}), "invalid_field", "messages", "at least 1"),
        ("chat", _raw({"model": "m", "messages": "hi"}), "invalid_field", "messages", "list"),
        (
            "chat",
            _raw({"model": "m", "messages": [{"content": "x"}]}),
            "invalid_field",
            "messages[0].role",
            "required",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "invalid_field",
            "messages[0].content",
            "string",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": [*_MSG, {"role": "user", "content": [1]}]}),
            "invalid_field",
            "messages[1].content",
            r"part \[0\]",
        ),
        (
            "chat",
            _raw(
                {
                    "model": "m",
                    "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}],
                }
            ),
            "invalid_field",
            "messages[0].content",
            "text part",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "stream": "yes"}),
            "invalid_field",
            "stream",
            "boolean",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_tokens": 0}),
            "invalid_field",
            "max_tokens",
            "greater than 0",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_tokens": -3}),
            "invalid_field",
            "max_tokens",
            "greater than 0",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_tokens": 1.5}),
            "invalid_field",
            "max_tokens",
            "integer",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_tokens": "10"}),
            "invalid_field",
            "max_tokens",
            "integer",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_tokens": True}),
            "invalid_field",
            "max_tokens",
            "integer",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "max_completion_tokens": 2**40}),
            "invalid_field",
            "max_completion_tokens",
            "less than",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "response_format": "json"}),
            "invalid_field",
            "response_format",
            "object",
        ),
        (
            "chat",
            _raw({"model": "m", "messages": _MSG, "response_format": {"schema": {}}}),
            "invalid_field",
            "response_format",
            "type",
        ),
        ("completions", _raw({"model": "m"}), "invalid_field", "prompt", "required"),
        ("completions", _raw({"model": "m", "prompt": 7}), "invalid_field", "prompt", "string"),
        ("completions", _raw({"model": "m", "prompt": []}), "invalid_field", "prompt", "non-empty"),
        (
            "completions",
            _raw({"model": "m", "prompt": [[1, 2]]}),
            "invalid_field",
            "prompt",
            "list of strings",
        ),
    ],
)
def test_bad_bodies_name_the_field(
    kind: BodyKind, raw: bytes, code: str, param: str | None, words: str
) -> None:
    with pytest.raises(InvalidRequest, match=words) as err:
        parse_request_body(raw, kind)
    assert err.value.code == code
    assert err.value.param == param
    assert err.value.status == 400


def test_the_classified_text_is_the_last_user_turn() -> None:
    body = {
        "model": "auto",
        "max_tokens": 5,
        "messages": [
            {"role": "system", "content": "```python\ndef f(): return 1\n```" * 40},
            {"role": "user", "content": "hi! how are you today?"},
        ],
    }
    # A long system prompt must not make every request look like code (docs/classifier.md).
    parsed = parse_request_body(_raw(body), "chat")
    assert parsed.classify_text == "hi! how are you today?"
    assert parsed.alias == "auto"
    assert parsed.max_output_tokens == 5
    assert parsed.input_chars > 1000


# --- rewrite_model ------------------------------------------------------------------------


def test_rewrite_replaces_only_the_top_level_value() -> None:
    raw = b'{ "a" : {"model":"x"}, "model" :\t"auto" , "z":["model", {"model": "y"}]}'
    out = rewrite_model(raw, "served/llama")
    assert (
        out == b'{ "a" : {"model":"x"}, "model" :\t"served/llama" , "z":["model", {"model": "y"}]}'
    )


def test_rewrite_handles_escaped_keys_and_tricky_strings() -> None:
    raw = b'{"note": "a \\"model\\": \\"x\\" {[", "mod\\u0065l": "auto", "t": "\xc3\xa9\\\\"}'
    out = rewrite_model(raw, 'q"uote')
    assert json.loads(out) == {"note": 'a "model": "x" {[', "model": 'q"uote', "t": "é\\"}
    assert out.startswith(raw[: raw.index(b'"auto"')])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "hi \\"model\\": 1"}], "model": "auto"}',
        b'{"messages": [{"role": "user", "content": "x"}], "a\\"model": 1, "model": "auto"}',
        b'{"tools": [{"model": "inner"}], "messages": [{"role": "user", "content": "x"}],'
        b' "model": "auto"}',
        b'{"messages": [{"role": "user", "content": "x"}], "mod\\u0065l": "auto"}',
        b'{"model": "a", "messages": [{"role": "user", "content": "x"}], "model": "auto"}',
    ],
)
def test_the_validated_shortcut_rewrites_as_the_full_search(raw: bytes) -> None:
    """A body `parse_request_body` accepted may skip the depth check when one "model" key is
    found; with nested, escaped, look-alike or duplicate keys it must still agree."""
    parse_request_body(raw, "chat")
    assert rewrite_model(raw, "s", validated=True) == rewrite_model(raw, "s")
    assert json.loads(rewrite_model(raw, "s", validated=True))["model"] == "s"


def test_rewrite_rewrites_every_duplicate() -> None:
    out = rewrite_model(b'{"model": "a", "model": "b"}', "c")
    assert out == b'{"model": "c", "model": "c"}'


def test_rewrite_non_ascii_name_is_utf8() -> None:
    assert rewrite_model(b'{"model":"a"}', "modèle") == '{"model":"modèle"}'.encode()


@pytest.mark.parametrize(
    "raw", [b'{"messages": []}', b'{"a": {"model": "x"}}', b'["model", "x"]', b""]
)
def test_rewrite_without_model_fails(raw: bytes) -> None:
    with pytest.raises(InvalidRequest, match="model") as err:
        rewrite_model(raw, "x")
    assert err.value.param == "model"


@pytest.mark.parametrize(
    "raw", [b'{"model": 5}', b'{"model": 5, "x": "y"}', b'{"model": ["a"]}', b'{"model": "abc']
)
def test_rewrite_non_string_or_unterminated_model_fails(raw: bytes) -> None:
    with pytest.raises(InvalidRequest, match="string"):
        rewrite_model(raw, "x")


def test_unterminated_string_is_invalid_json() -> None:
    with pytest.raises(InvalidRequest, match="not valid JSON") as err:
        parse_request_body(b'{"model": "auto", "messages": [{"role": "user', "chat")
    assert err.value.code == "invalid_json"


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["model", "a", "b\\", 'q"', "é"]) | st.text(max_size=5),
            children,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@settings(max_examples=300)
@given(
    before=st.dictionaries(st.text(max_size=6).filter(lambda k: k != "model"), _json, max_size=4),
    after=st.dictionaries(st.text(max_size=6).filter(lambda k: k != "model"), _json, max_size=4),
    model=st.text(max_size=20),
    served=st.text(max_size=20),
    indent=st.sampled_from([None, 0, 2]),
    ensure_ascii=st.booleans(),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]),
)
def test_rewrite_property(
    before: dict[str, Any],
    after: dict[str, Any],
    model: str,
    served: str,
    indent: int | None,
    ensure_ascii: bool,
    separators: tuple[str, str],
) -> None:
    doc = {**before, "model": model, **{k: v for k, v in after.items() if k not in before}}
    raw = json.dumps(doc, indent=indent, ensure_ascii=ensure_ascii, separators=separators).encode()
    out = rewrite_model(raw, served)
    assert json.loads(out) == {**doc, "model": served}
    # A body the parser accepted takes the shortcut (one "model" key found: no depth check).
    assert rewrite_model(raw, served, validated=True) == out
    # Bytes outside the value span are identical: the output is prefix + new value + suffix.
    new_value = json.dumps(served, ensure_ascii=False).encode()
    cut = out.index(new_value, _value_start(raw))
    assert out[:cut] == raw[:cut]
    assert out[cut + len(new_value) :] == raw[len(raw) - (len(out) - cut - len(new_value)) :]


def _value_start(raw: bytes) -> int:
    """Offset of the top-level model value, found by a slow reference parse."""
    decoder = json.JSONDecoder()
    text = raw.decode()
    idx, depth, i = None, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            s, end = decoder.raw_decode(text, i)
            rest = text[end:].lstrip()
            if depth == 1 and s == "model" and rest.startswith(":"):
                idx = end + (len(text[end:]) - len(rest)) + 1
                idx += len(text[idx:]) - len(text[idx:].lstrip())
            i = end
            continue
        depth += ch in "[{"
        depth -= ch in "]}"
        i += 1
    assert idx is not None
    return len(text[:idx].encode())


# --- the hand-checked fast path agrees with pydantic ------------------------------------------

_scalar = (
    st.none() | st.booleans() | st.integers(-5, 2**32) | st.floats(-2, 2) | st.text(max_size=4)
)
_part = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "image_url", 3]),
        "text": st.text(max_size=5) | st.integers(),
    },
)
_content = st.none() | st.text(max_size=6) | st.lists(_part | _scalar, max_size=3) | st.integers()
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "system", "assistant"]) | st.integers() | st.none(),
        "content": _content,
        "name": st.text(max_size=3),
    },
)
_common = {
    "model": st.text(max_size=3) | st.text(min_size=250, max_size=260) | _scalar,
    "stream": _scalar,
    "max_tokens": _scalar | st.just(2**31 - 1) | st.just(2**31),
    "max_completion_tokens": _scalar,
    "response_format": _scalar
    | st.fixed_dictionaries({}, optional={"type": st.sampled_from(["json_object", "text", 1])}),
    "temperature": _scalar,
}
_valid_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system"]), "content": st.text(max_size=6)},
    optional={"name": st.text(max_size=3)},
)
_valid = {
    "model": st.text(min_size=1, max_size=8),
    "stream": st.none() | st.booleans(),
    "max_tokens": st.none() | st.integers(1, 100),
    "response_format": st.none() | st.sampled_from([{"type": "json_object"}, {"type": "text"}]),
}
_chat = st.fixed_dictionaries(
    {"model": _valid["model"], "messages": st.lists(_valid_message, min_size=1, max_size=3)},
    optional={k: v for k, v in _valid.items() if k != "model"},
)
_completion = st.fixed_dictionaries(
    {"model": _valid["model"], "prompt": st.text(max_size=5) | st.lists(st.text(), min_size=1)},
    optional={k: v for k, v in _valid.items() if k != "model"},
)
# One or two fields replaced by anything: most bodies stay valid, the rest probe each check.
_wild = st.dictionaries(
    st.sampled_from([*_common, "messages", "prompt"]),
    st.one_of(
        *_common.values(), st.lists(_message | _scalar, max_size=3), st.lists(_scalar, max_size=3)
    ),
    max_size=2,
)


def _judged(doc: dict[str, Any], kind: BodyKind) -> ParsedBody | str:
    try:
        return validated_facts(doc, kind)
    except InvalidRequest as err:
        return str(err)


@settings(max_examples=500)
@given(
    st.one_of(_chat.map(lambda d: ("chat", d)), _completion.map(lambda d: ("completions", d))),
    _wild,
)
def test_the_fast_path_reads_what_pydantic_accepts(
    case: tuple[str, dict[str, Any]], changes: dict[str, Any]
) -> None:
    kind, valid = case
    doc = {**valid, **changes}
    assert kind in ("chat", "completions")
    fast = chat_facts(doc) if kind == "chat" else completion_facts(doc)
    slow = _judged(doc, "chat" if kind == "chat" else "completions")
    if fast is not None:
        assert slow == ParsedBody(*fast)  # accepted by both, with the same facts
    parsed = _judged_raw(json.dumps(doc).encode(), "chat" if kind == "chat" else "completions")
    assert parsed == slow  # the public function answers as pydantic does, errors included


def _judged_raw(raw: bytes, kind: BodyKind) -> ParsedBody | str:
    try:
        return parse_request_body(raw, kind)
    except InvalidRequest as err:
        return str(err)


def _spans_or_error(find: Any, raw: bytes) -> list[tuple[int, int]] | str:
    try:
        return list(find(raw))
    except InvalidRequest as err:
        return str(err)


@settings(max_examples=400)
@given(
    doc=st.dictionaries(st.sampled_from(["model", "a", "m"]) | st.text(max_size=3), _json),
    escape=st.booleans(),
    cut=st.none() | st.integers(0, 200),
)
def test_the_key_search_finds_what_the_linear_scan_finds(
    doc: dict[str, Any], escape: bool, cut: int | None
) -> None:
    raw = json.dumps(doc).encode()
    if escape:
        raw = raw.replace(b'"model"', b'"mod\\u0065l"', 1)
    if cut is not None:
        raw = raw[:cut]  # unterminated strings, half keys, missing values
    fast = _spans_or_error(_model_value_spans, raw)
    assert fast == _spans_or_error(_scanned_model_value_spans, raw)


def _stdlib_path(raw: bytes, kind: BodyKind) -> ParsedBody | str:
    """What the body gives through json + the hand check + pydantic only (no orjson)."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            return "not an object"
        facts = chat_facts(doc) if kind == "chat" else completion_facts(doc)
        return ParsedBody(*facts) if facts is not None else validated_facts(doc, kind)
    except InvalidRequest as err:
        return err.message
    except ValueError:
        return "not JSON"


@pytest.mark.parametrize(
    "raw",
    [
        # integers beyond 64 bits: orjson makes them floats, json keeps them ints
        b'{"model": "m", "max_tokens": 100000000000000000000000, "messages": [{"role": "user"}]}',
        b'{"model": "m", "max_tokens": 64, "seed": 100000000000000000000000, "messages": []}',
        # a lone surrogate: orjson refuses it, json takes it
        b'{"model": "m", "messages": [{"role": "user", "content": "a \\ud800 b"}]}',
        # numbers beyond a double: orjson refuses, json makes them inf
        b'{"model": "m", "temperature": 1e400, "messages": [{"role": "user", "content": "x"}]}',
        # a duplicated key: both keep the last
        b'{"model": "a", "model": "b", "messages": [{"role": "user", "content": "x"}]}',
    ],
)
def test_orjson_fast_path_answers_as_the_standard_decoder(raw: bytes) -> None:
    expected = _stdlib_path(raw, "chat")
    try:
        got: ParsedBody | str = parse_request_body(raw, "chat")
    except InvalidRequest as err:
        got = err.message
    assert got == expected


def test_bom_is_refused_with_the_standard_wording() -> None:
    with pytest.raises(InvalidRequest, match="BOM"):
        parse_request_body(b"\xef\xbb\xbf" + _raw({"model": "m", "messages": _MSG}), "chat")


def _tools_body(tools: int) -> bytes:
    """A chat body with `tools` function tools (over MAX_DEPTH brackets in all, 5 levels deep)."""
    tool = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "required": ["key"]}},
    }
    return _raw({"model": "m", "messages": _MSG, "tools": [tool] * tools})


def test_a_wide_shallow_body_is_checked_without_the_per_string_scanner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36: the per-string scanner in Python held the loop 4.7 ms for 126 KB of tools
    (docs/benchmarks.md, section 7); a body within MAX_DEPTH is now cleared in C."""

    def scanner(raw: bytes) -> Any:
        raise AssertionError("the per-string scanner ran")

    monkeypatch.setattr(body_module, "_strings", scanner)
    parsed = parse_request_body(_tools_body(300), "chat")
    assert parsed.alias == "m"
    assert parsed.tools_chars > 300 * 80


def _nested(depth: int, inside: str = "") -> str:
    return "[" * depth + inside + "]" * depth


@pytest.mark.parametrize(
    "text",
    [
        _nested(MAX_DEPTH),
        _nested(MAX_DEPTH + 1),
        "[" + ",".join([_nested(MAX_DEPTH - 1)] * 40) + "]",
        "[" + ",".join([_nested(MAX_DEPTH)] * 40) + "]",
        '["' + "[" * 200 + '"]',  # brackets inside a string do not nest
        '["\\"' + "[" * 200 + '"]',  # nor after an escaped quote
        '["\\\\"' + ",[" * 100 + "]" * 100 + "]",  # an escaped backslash ends the string
        "[" * 70 + "}" * 70,  # unbalanced: the scanner decides
        '["' + "[" * 100,  # an unterminated string
        "{" + '"a": {' * 70 + "1" + "}" * 71,
        "{" + '"a": {' * 63 + "1" + "}" * 64,
        "[" * 100_000,
    ],
)
def test_the_depth_check_refuses_what_the_scanner_refuses(text: str) -> None:
    raw = text.encode()

    def scanned() -> bool:
        try:
            for _ in body_module._strings(raw):
                pass
        except InvalidRequest:
            return False
        return True

    try:
        body_module._check_depth(raw)
        refused = False
    except InvalidRequest:
        refused = True
    assert refused == (not scanned())


@given(
    st.recursive(st.none() | st.text(alphabet='[]{}"\\ab'), lambda c: st.lists(c, max_size=3)),
    st.integers(min_value=55, max_value=66),
)
@settings(max_examples=300, deadline=None)
def test_the_depth_check_agrees_with_the_scanner_on_any_document(doc: Any, wrap: int) -> None:
    for _ in range(wrap):
        doc = [doc]
    raw = _raw(doc)
    within = True
    try:
        for _ in body_module._strings(raw):
            pass
    except InvalidRequest:
        within = False
    if body_module._within_depth(raw):  # it clears only what the scanner clears
        assert within
    try:
        body_module._check_depth(raw)
    except InvalidRequest:
        assert not within
    else:
        assert within
