"""The constraint query language (Mindbreeze-style query expressions) -> a syntax tree.

    title:bible                    the word "bible" in the title
    title:"king james"             the words in sequence (a phrase)
    "king ja*"                     a phrase whose last word starts with "ja"
    url:example.com/docs           several words in one term are a phrase too: example com docs
    description:transl*            a word of the description starting with "transl"
    faith "good works"             bare terms and phrases are on `text`
    a b                            implicit AND: both
    a AND b, a OR b, NOT a         operators in capitals ("and" is an ordinary word)
    (a OR b) NOT c, title:(a OR b) parentheses group; `label:(...)` sets the label inside

Precedence: NOT binds tightest, then AND (explicit or implicit), then OR, so
`a OR b c` is `a OR (b AND c)` and `NOT a b` is `(NOT a) AND b`.

Labels: title, url, description, image_url, library, text (case-insensitive). Words are matched
as `words.py` defines them; a bare term matches whole words only (`pre*` for a prefix).
What the language does not have is refused with a one-line `ConstraintError` naming the
construct and its offset: unknown labels, unbalanced parentheses, dangling operators, regular
expressions (`/.../`), wildcards other than a final `*`, fuzzy or proximity `~`, boosts `^`,
ranges `[a TO b]`, and `-`/`+`/`!` prefixes (use NOT).

Limits keep any expression cheap: MAX_CHARS characters, MAX_DEPTH nesting (parentheses and
NOTs), MAX_TERMS terms, MAX_PHRASE_WORDS words in one phrase.
"""

from __future__ import annotations

from dataclasses import dataclass

from host.constraints.errors import ConstraintError
from host.constraints.syntax import And, Node, Not, Or, Words
from host.constraints.words import LABELS, WORD, fold

MAX_CHARS = 2048
MAX_DEPTH = 32
MAX_TERMS = 64
MAX_PHRASE_WORDS = 64
OPERATORS = ("AND", "OR", "NOT")
LABEL_LIST = ", ".join(LABELS)


@dataclass(frozen=True)
class Token:
    kind: str  # "(", ")", "AND", "OR", "NOT", "term", "phrase", "label(" (a label opening a group)
    text: str  # the term or phrase as written (unquoted), else the token's characters
    label: str | None
    position: int


class _Where:
    """Formats where a problem is: an offset, and the JSON path of a structured form's string."""

    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, message: str, position: int, hint: str = "") -> ConstraintError:
        place = f" of {self.path}" if self.path else ""
        return ConstraintError(f"{message} at {position}{place}" + (f"; {hint}" if hint else ""))

    def whole(self, message: str) -> ConstraintError:
        return ConstraintError(message + (f" at {self.path}" if self.path else ""))


def parse_query(text: str, *, default_label: str = "text", path: str = "") -> Node:
    """Parse a query expression; `path` names where it sat in a structured form, for errors."""
    where = _Where(path)
    if not isinstance(text, str):
        raise where.whole(f"a query expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise where.whole(f"constraint is {len(text)} characters, over the limit of {MAX_CHARS}")
    tokens = _lex(text, where)
    if not tokens:
        raise where.whole("empty constraint")
    return _Parser(tokens, where, len(text)).parse(default_label)


# ---- lexing -----------------------------------------------------------------------------------


def _lex(text: str, where: _Where) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char.isspace():
            position += 1
        elif char in "()":
            tokens.append(Token(char, char, None, position))
            position += 1
        elif char == '"':
            phrase, after = _read_phrase(text, position, where)
            tokens.append(Token("phrase", phrase, None, position))
            position = after
        else:
            start = position
            while position < len(text) and not text[position].isspace() and text[position] not in '()"':
                position += 1
            token, position = _word_token(text, start, position, where)
            tokens.append(token)
    return tokens


def _read_phrase(text: str, start: int, where: _Where) -> tuple[str, int]:
    """The phrase opening at `start` (a quote), unescaped, and the offset after its closing quote."""
    characters = []
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text) and text[position + 1] in '"\\':
            characters.append(text[position + 1])
            position += 2
            continue
        if char == '"':
            position += 1
            if position < len(text) and not text[position].isspace() and text[position] not in "()":
                raise where.error(f"unexpected {text[position]!r} after a phrase", position)
            return "".join(characters), position
        characters.append(char)
        position += 1
    raise where.error("unterminated quote", start)


def _word_token(text: str, start: int, end: int, where: _Where) -> tuple[Token, int]:
    """An operator, a term, a `label:term`, or a label opening a phrase or a group; and where
    lexing resumes."""
    raw = text[start:end]
    if raw in OPERATORS:
        return Token(raw, raw, None, start), end
    if ":" not in raw:
        _check_term(raw, start, where)
        return Token("term", raw, None, start), end
    name, term = raw.split(":", 1)
    label = _label(name, start, where)
    if term:
        _check_term(term, start + len(name) + 1, where)
        return Token("term", term, label, start), end
    if end < len(text) and text[end] == '"':
        phrase, after = _read_phrase(text, end, where)
        return Token("phrase", phrase, label, start), after
    if end < len(text) and text[end] == "(":
        return Token("label(", raw, label, start), end + 1
    raise where.error(f"expected a term, phrase or group after '{name}:'", end)


def _label(name: str, position: int, where: _Where) -> str:
    if not name:
        raise where.error("missing label before ':'", position)
    label = name.lower()
    if label not in LABELS:
        raise where.error(f"unknown label {name!r}", position, f"labels are {LABEL_LIST}")
    return label


def _check_term(term: str, position: int, where: _Where) -> None:
    """Refuse, by name, the query-language constructs of other engines that we do not have."""
    if term in ("&&", "||"):
        raise where.error(f"{term!r} is not an operator", position, "use AND or OR")
    if term[0] in "+-!":
        raise where.error(f"{term[0]!r} before a term is not supported", position, "use NOT")
    if len(term) >= 2 and term[0] == "/" and term[-1] == "/":
        raise where.error("regular expressions are not supported", position)
    if term[0] in "[{":
        raise where.error("range queries are not supported", position)
    for symbol, construct in (("~", "fuzzy and proximity searches ('~') are"), ("^", "boosts ('^') are"),
                              ("?", "the wildcard '?' is")):
        if symbol in term:
            raise where.error(f"{construct} not supported", position + term.index(symbol))
    star = term.find("*")
    if star != -1 and star != len(term) - 1:
        raise where.error("wildcards are supported only at the end of a word ('pre*')", position + star)
    if star != -1 and not WORD.fullmatch(fold(term[-2:-1])):
        raise where.error("'*' must follow a letter or digit", position + star)
    if not WORD.search(fold(term)):
        raise where.error(f"no words in {term!r}", position)


# ---- parsing ----------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over the tokens: or_expr > and_expr > not_expr > primary."""

    def __init__(self, tokens: list[Token], where: _Where, length: int) -> None:
        self.tokens = tokens
        self.next = 0
        self.where = where
        self.length = length
        self.terms = 0

    def peek(self) -> Token | None:
        return self.tokens[self.next] if self.next < len(self.tokens) else None

    def take(self) -> Token:
        token = self.tokens[self.next]
        self.next += 1
        return token

    def parse(self, label: str) -> Node:
        node = self.or_expr(label, 0)
        token = self.peek()
        if token is not None:  # only a ")" stops an or_expr early
            raise self.where.error("unbalanced parenthesis", token.position)
        return node

    def needs_right(self, operator: Token) -> None:
        after = self.peek()
        if after is None or after.kind in (")", "AND", "OR"):
            raise self.where.error(f"{operator.kind!r} needs a term on its right", operator.position)

    def or_expr(self, label: str, depth: int) -> Node:
        children = [self.and_expr(label, depth)]
        while (token := self.peek()) is not None and token.kind == "OR":
            self.needs_right(self.take())
            children.append(self.and_expr(label, depth))
        return children[0] if len(children) == 1 else Or(tuple(children))

    def and_expr(self, label: str, depth: int) -> Node:
        children = [self.not_expr(label, depth)]
        while (token := self.peek()) is not None and token.kind not in ("OR", ")"):
            if token.kind == "AND":
                self.needs_right(self.take())
            children.append(self.not_expr(label, depth))
        return children[0] if len(children) == 1 else And(tuple(children))

    def not_expr(self, label: str, depth: int) -> Node:
        token = self.peek()
        if token is not None and token.kind == "NOT":
            self.needs_right(self.take())
            self.check_depth(depth + 1, token)
            return Not(self.not_expr(label, depth + 1))
        return self.primary(label, depth)

    def check_depth(self, depth: int, token: Token) -> None:
        if depth > MAX_DEPTH:
            raise self.where.error(f"expression nested deeper than {MAX_DEPTH}", token.position)

    def primary(self, label: str, depth: int) -> Node:
        token = self.peek()
        if token is None:
            raise self.where.error("expected a term", self.length)
        self.take()
        if token.kind in ("(", "label("):
            self.check_depth(depth + 1, token)
            closing = self.peek()
            if closing is not None and closing.kind == ")":
                raise self.where.error("empty parentheses", token.position)
            node = self.or_expr(token.label or label, depth + 1)
            closing = self.peek()
            if closing is None:
                raise self.where.error("unbalanced parenthesis", token.position + len(token.text) - 1)
            self.take()
            return node
        if token.kind == ")":
            raise self.where.error("unbalanced parenthesis", token.position)
        if token.kind in ("AND", "OR"):
            raise self.where.error(f"{token.kind!r} needs a term on its left", token.position)
        return self.leaf(token, token.label or label)

    def leaf(self, token: Token, label: str) -> Words:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise self.where.error(f"more than {MAX_TERMS} terms", token.position)
        body = token.text.rstrip() if token.kind == "phrase" else token.text
        prefix = body.endswith("*")
        if token.kind == "phrase" and "*" in body[:-1] + ("" if prefix else body[-1:]):
            raise self.where.error("a phrase may hold '*' only at its end ('\"king ja*\"')", token.position)
        if prefix and not WORD.fullmatch(fold(body[-2:-1])):
            raise self.where.error("'*' must follow a letter or digit", token.position)
        found = WORD.findall(fold(body[:-1] if prefix else body))
        if not found:
            raise self.where.error("no words in the phrase", token.position)
        if len(found) > MAX_PHRASE_WORDS:
            raise self.where.error(f"more than {MAX_PHRASE_WORDS} words in one phrase", token.position)
        return Words(label, tuple(found), prefix)
