"""The JSON tree check every annotation passes: the quick walk (no paths) must never call a
tree clean that the walk naming paths finds a problem in, on any tree."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from xpushare.codec import _safejson as sj

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=8),
    st.sampled_from(["\ud800", "a\udfffb", "ünï", "plain"]),
    st.tuples(st.integers()),  # not a JSON type: the path walk decides
)
_trees = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.sampled_from(["\udc00", "k\ud900"])),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=30,
)


def _nested(depth: int, leaf: Any) -> Any:
    tree = leaf
    for i in range(depth):
        tree = [tree] if i % 2 else {"k": tree}
    return tree


@settings(max_examples=400, deadline=None)
@given(_trees)
def test_the_quick_walk_agrees_with_the_walk_that_names_paths(tree: Any) -> None:
    assert sj.scan(tree) == sj._problem(tree)
    if sj._clean(tree):
        assert sj._problem(tree) is None


def test_each_problem_is_found_and_named_through_the_quick_walk() -> None:
    assert sj.scan({"a": [1, {"b": 2**64}]}) == "number at a[1].b does not fit in 64 bits"
    assert sj.scan({"a": float("inf")}) == "number at a is too large"
    assert sj.scan(["ok", "x\ud800"]) == "string at [1] is not valid UTF-8 (lone surrogate)"
    assert sj.scan({"\udc00": 1}) == "object key is not valid UTF-8 (lone surrogate)"
    assert sj.scan(_nested(sj.MAX_JSON_DEPTH, 1)) is None
    assert sj.scan(_nested(sj.MAX_JSON_DEPTH + 1, 1)).startswith("JSON nested deeper than")
    assert sj.scan({"ascii": "text", "n": [1, 2.5, None, True]}) is None
