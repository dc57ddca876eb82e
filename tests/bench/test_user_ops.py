"""bench.user_ops' ratio of a peer to laytune, on fabricated rounds."""

import pytest

from bench.user_ops import paired_ratio


def test_a_ratio_is_the_median_of_the_rounds_ratios_with_their_range():
    # laytune's third round fell in a burst that halved the host's speed, and
    # the peer's round beside it too: the round's ratio stays near the others
    ours = [0.20, 0.21, 0.42, 0.20, 0.19]
    peer = [0.25, 0.25, 0.50, 0.23, 0.30]
    assert paired_ratio(ours, peer) == "1.19x (1.15-1.58)"


def test_a_burst_on_one_side_moves_one_round_not_the_ratio():
    ours = [0.10, 0.10, 0.10]
    assert paired_ratio(ours, [0.09, 0.30, 0.09]) == "0.90x (0.90-3.00)"
    assert paired_ratio([0.10, 0.35, 0.10], [0.09, 0.09, 0.09]) == "0.90x (0.26-0.90)"


def test_one_round_has_no_range_and_none_has_no_ratio():
    assert paired_ratio([0.2], [0.3]) == "1.50x"
    assert paired_ratio([], []) == "-"


def test_rounds_of_both_sides_must_pair():
    with pytest.raises(ValueError):
        paired_ratio([0.1, 0.1], [0.1])
