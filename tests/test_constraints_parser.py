"""The constraint query language and Mindbreeze's structured forms: every construct, every refusal."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.constraints import ConstraintError, parse_constraint
from host.constraints.parser import MAX_CHARS, MAX_DEPTH, MAX_PHRASE_WORDS, MAX_TERMS, parse_query
from host.constraints.syntax import And, Node, Not, Or, Words


def text(*words: str, prefix: bool = False) -> Words:
    return Words("text", words, prefix)


# ---- what the language says --------------------------------------------------------------------


@pytest.mark.parametrize(("query", "tree"), [
    ("bible", text("bible")),
    ("Bible", text("bible")),  # words are case-folded
    ("title:bible", Words("title", ("bible",))),
    ("TITLE:Bible", Words("title", ("bible",))),  # labels too
    ('title:"King James"', Words("title", ("king", "james"))),
    ('"king james"', text("king", "james")),
    ("transl*", text("transl", prefix=True)),
    ('"king ja*"', text("king", "ja", prefix=True)),
    ('title:"king ja*" ', Words("title", ("king", "ja"), prefix=True)),
    ("description:transl*", Words("description", ("transl",), prefix=True)),
    ("url:example.com/docs", Words("url", ("example", "com", "docs"))),  # one term, several words: a phrase
    ("url:example.co*", Words("url", ("example", "co"), prefix=True)),
    ("image_url:png", Words("image_url", ("png",))),
    ("library:sample", Words("library", ("sample",))),
    ("text:faith", text("faith")),
    ("a b", And((text("a"), text("b")))),  # implicit AND
    ("a AND b", And((text("a"), text("b")))),
    ("a OR b", Or((text("a"), text("b")))),
    ("NOT a", Not(text("a"))),
    ("a and b", And((text("a"), text("and"), text("b")))),  # operators are capitals only
    ("a OR b c", Or((text("a"), And((text("b"), text("c")))))),  # AND binds tighter than OR
    ("a b OR c", Or((And((text("a"), text("b"))), text("c")))),
    ("NOT a b", And((Not(text("a")), text("b")))),  # NOT binds tightest
    ("a NOT b", And((text("a"), Not(text("b"))))),
    ("a OR NOT b", Or((text("a"), Not(text("b"))))),
    ("NOT NOT a", Not(Not(text("a")))),
    ("(a OR b) c", And((Or((text("a"), text("b"))), text("c")))),
    ("title:(a OR \"b c\") d", And((Or((Words("title", ("a",)), Words("title", ("b", "c")))), text("d")))),
    ("title:(a url:b)", And((Words("title", ("a",)), Words("url", ("b",))))),  # an inner label wins
    ('"say \\"hi\\""', text("say", "hi")),  # escaped quotes inside a phrase
    ("e-mail", text("e", "mail")),
    ("\uff22\uff29\uff22\uff2c\uff25", text("bible")),  # full width folds to ASCII
    ("Straße", text("strasse")),  # case folding, not just lower()
    ("  a   (b)  ", And((text("a"), text("b")))),
])
def test_a_query_parses_to_its_tree(query: str, tree: Node) -> None:
    assert parse_query(query) == tree


@pytest.mark.parametrize(("query", "message"), [
    ("author:smith", "unknown label 'author' at 0; labels are title, url, description, image_url, library, text"),
    ("a AND by:x", "unknown label 'by' at 6; labels are title, url, description, image_url, library, text"),
    (":x", "missing label before ':' at 0"),
    ("title: x", "expected a term, phrase or group after 'title:' at 6"),
    ("title:", "expected a term, phrase or group after 'title:' at 6"),
    ("(a OR b", "unbalanced parenthesis at 0"),
    ("a OR b)", "unbalanced parenthesis at 6"),
    ("a (b (c)", "unbalanced parenthesis at 2"),
    ("title:(a", "unbalanced parenthesis at 5"),
    ("()", "empty parentheses at 0"),
    ("a AND", "'AND' needs a term on its right at 2"),
    ("a OR", "'OR' needs a term on its right at 2"),
    ("a NOT", "'NOT' needs a term on its right at 2"),
    ("a AND OR b", "'AND' needs a term on its right at 2"),
    ("(a AND) b", "'AND' needs a term on its right at 3"),
    ("AND a", "'AND' needs a term on its left at 0"),
    ("OR a", "'OR' needs a term on its left at 0"),
    ('"king james', "unterminated quote at 0"),
    ('title:"king', "unterminated quote at 6"),
    ('"a"b', "unexpected 'b' after a phrase at 3"),
    ('"a"*', "unexpected '*' after a phrase at 3"),
    ('"king* james"', "a phrase may hold '*' only at its end ('\"king ja*\"') at 0"),
    ('"king -*"', "'*' must follow a letter or digit at 0"),
    ("/bi.le/", "regular expressions are not supported at 0"),
    ("title:/bi.le/", "regular expressions are not supported at 6"),
    ("bi*le", "wildcards are supported only at the end of a word ('pre*') at 2"),
    ("*ble", "wildcards are supported only at the end of a word ('pre*') at 0"),
    ("*", "'*' must follow a letter or digit at 0"),
    ("a-*", "'*' must follow a letter or digit at 2"),
    ("bib?e", "the wildcard '?' is not supported at 3"),
    ("bible~2", "fuzzy and proximity searches ('~') are not supported at 5"),
    ("bible^2", "boosts ('^') are not supported at 5"),
    ("[a TO b]", "range queries are not supported at 0"),
    ("{a TO b}", "range queries are not supported at 0"),
    ("-bible", "'-' before a term is not supported at 0; use NOT"),
    ("+bible", "'+' before a term is not supported at 0; use NOT"),
    ("!bible", "'!' before a term is not supported at 0; use NOT"),
    ("a && b", "'&&' is not an operator at 2; use AND or OR"),
    ("a || b", "'||' is not an operator at 2; use AND or OR"),
    ("...", "no words in '...' at 0"),
    ('""', "no words in the phrase at 0"),
    ('title:"--"', "no words in the phrase at 0"),
    ("", "empty constraint"),
    ("   ", "empty constraint"),
])
def test_what_the_language_lacks_is_one_line_naming_it_and_where(query: str, message: str) -> None:
    with pytest.raises(ConstraintError) as refused:
        parse_query(query)
    assert str(refused.value) == message
    assert isinstance(refused.value, ValueError)


def test_limits_bound_every_expression() -> None:
    with pytest.raises(ConstraintError, match=f"over the limit of {MAX_CHARS}"):
        parse_query("a " * (MAX_CHARS // 2 + 1))
    with pytest.raises(ConstraintError, match=f"more than {MAX_TERMS} terms at"):
        parse_query(" ".join(["a"] * (MAX_TERMS + 1)))
    parse_query(" ".join(["a"] * MAX_TERMS))
    with pytest.raises(ConstraintError, match=f"nested deeper than {MAX_DEPTH} at"):
        parse_query("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1))
    parse_query("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH)
    with pytest.raises(ConstraintError, match=f"nested deeper than {MAX_DEPTH} at"):
        parse_query("NOT " * (MAX_DEPTH + 1) + "a")
    with pytest.raises(ConstraintError, match=f"more than {MAX_PHRASE_WORDS} words in one phrase"):
        parse_query('"' + "a " * (MAX_PHRASE_WORDS + 1) + '"')


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*'ab:() "*~^?/-!\\[]{}', "AND", "OR", "NOT", "title", "url", " "]), max_size=30))
def test_any_string_parses_or_is_refused_in_one_line(pieces: list[str]) -> None:
    query = "".join(pieces)
    try:
        parse_query(query)
    except ConstraintError as refused:
        assert "\n" not in str(refused) and str(refused).strip()


# ---- structured forms ------------------------------------------------------------------------------


@pytest.mark.parametrize(("form", "tree"), [
    ({"unparsed": "title:bible faith"}, And((Words("title", ("bible",)), text("faith")))),
    ({"quoted_term": "King James"}, text("king", "james")),
    ({"label": "title", "quoted_term": "King James"}, Words("title", ("king", "james"))),
    ({"label": "Title", "unparsed": "bible OR torah"}, Or((Words("title", ("bible",)), Words("title", ("torah",))))),
    ({"and": [{"quoted_term": "a"}, {"not": {"unparsed": "b"}}]}, And((text("a"), Not(text("b"))))),
    ({"or": [{"quoted_term": "a"}]}, Or((text("a"),))),
    ({"quoted_term": "a", "id": "q1", "description": "annotations change nothing"}, text("a")),
])
def test_a_structured_form_parses_to_its_tree(form: dict, tree: Node) -> None:
    assert parse_constraint(form) == tree
    assert parse_constraint(json.dumps(form)) == tree  # one form field of JSON text
    assert parse_constraint("  " + json.dumps(form)) == tree


@pytest.mark.parametrize(("form", "message"), [
    ({"regex": "bi.le"}, "regular expressions are not supported at constraint.regex"),
    ({"and": [{"label": "title", "regex": "b.*"}]}, "regular expressions are not supported at constraint.and[0].regex"),
    ({"label": "year", "range": {"from": 1}}, "range constraints are not supported at constraint.range"),
    ({"term": "a"}, "unknown key 'term' at constraint; an expression has one of unparsed, quoted_term, and, or, not"),
    ({}, "constraint must have exactly one of unparsed, quoted_term, and, or, not; it has none"),
    ({"unparsed": "a", "quoted_term": "b"}, "it has unparsed and quoted_term"),
    ({"label": "author", "quoted_term": "x"}, "unknown label 'author' at constraint.label; labels are title"),
    ({"label": "title", "and": [{"quoted_term": "x"}]}, "a label goes with unparsed or quoted_term, not with and"),
    ({"and": []}, "constraint.and must be a non-empty list of expressions"),
    ({"or": {"quoted_term": "a"}}, "constraint.or must be a non-empty list of expressions"),
    ({"not": "a"}, "constraint.not must be an object, got str"),
    ({"and": [{"quoted_term": "a"}, 7]}, "constraint.and[1] must be an object, got int"),
    ({"quoted_term": 3}, "constraint.quoted_term must be a string, got int"),
    ({"quoted_term": "--"}, "no words in the quoted_term at constraint.quoted_term"),
    ({"not": {"unparsed": "a AND"}}, "'AND' needs a term on its right at 2 of constraint.not.unparsed"),
    ({"or": [{"unparsed": "x"}, {"unparsed": "author:x"}]}, "unknown label 'author' at 0 of constraint.or[1].unparsed"),
    ("{not json", "constraint starts with '{' but is not valid JSON"),
    (["a"], "constraint must be a string or an object, got list"),
    (7, "constraint must be a string or an object, got int"),
])
def test_a_bad_structured_form_is_named_by_its_json_path(form: object, message: str) -> None:
    with pytest.raises(ConstraintError) as refused:
        parse_constraint(form)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_structured_forms_are_bounded_too() -> None:
    deep: dict = {"quoted_term": "a"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"not": deep}
    with pytest.raises(ConstraintError, match="nested deeper than"):
        parse_constraint(deep)
    with pytest.raises(ConstraintError, match=f"over the limit of {MAX_TERMS}"):
        parse_constraint({"or": [{"quoted_term": "a"}] * (MAX_TERMS + 1)})
    with pytest.raises(ConstraintError, match=f"over {MAX_CHARS} characters"):
        parse_constraint({"or": [{"quoted_term": "a" * 1000}] * 3})
