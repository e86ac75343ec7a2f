"""util/java.py: a HashSet's order of some of its names, without hashing the others, is the
whole set's order restricted to them (CreatePartitions hashes only the topics that exist)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from snakka.util.java import java_hash_set_order


@given(st.lists(st.text(min_size=1, max_size=12), max_size=200), st.data())
def test_order_of_a_subset_is_the_whole_order_restricted(names, data):
    unique = list(dict.fromkeys(names))
    some = data.draw(st.lists(st.sampled_from(unique), unique=True) if unique else st.just([]))
    chosen = set(some)
    subset = [n for n in unique if n in chosen]  # insertion order kept, as the handler does
    whole = [n for n in java_hash_set_order(unique) if n in chosen]
    assert list(java_hash_set_order(subset, set_size=len(unique))) == whole
