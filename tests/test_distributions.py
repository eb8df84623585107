import random
import statistics

import pytest

from runners.spec import problems
from runners.workload import distributions


def test_fixed_always_same():
    assert distributions.sample_lengths("fixed:32", 5, seed=1) == [32] * 5


def test_uniform_stays_in_bounds_and_covers_them():
    values = distributions.sample_lengths("uniform:3:6", 400, seed=0)
    assert set(values) == {3, 4, 5, 6}


def test_normal_mean_and_floor_at_one():
    values = distributions.sample_lengths("normal:200:20", 4000, seed=0)
    assert abs(statistics.fmean(values) - 200) < 2
    assert min(distributions.sample_lengths("normal:2:50", 500, seed=0)) == 1


def test_lognormal_median():
    values = distributions.sample_lengths("lognormal:512:0.6", 4001, seed=0)
    assert 490 < statistics.median(values) < 535


def test_file_draws_only_listed_values(tmp_path):
    path = tmp_path / "lens.txt"
    path.write_text("10, 20\n30\n")
    values = distributions.sample_lengths(f"file:{path}", 300, seed=0)
    assert set(values) == {10, 20, 30}
    assert distributions.parse(f"file:{path}").upper_bound() == 30


def test_same_seed_same_lengths():
    d = distributions.parse("lognormal:100:1.0")
    assert d.sample(50, random.Random(7)) == d.sample(50, random.Random(7))


@pytest.mark.parametrize("text, fragment", [
    ("", "unknown distribution"), ("poisson:3", "unknown distribution"), ("fixed", "takes 1"),
    ("fixed:0", "≥ 1"), ("fixed:2.5", "whole"), ("uniform:9:3", "LO ≤ HI"), ("normal:10", "takes 2"),
    ("normal:10:-1", "SD ≥ 0"), ("lognormal:abc:1", "not a number"), ("fixed:nan", "finite"),
    ("file:/no/such/file", "not found"),
    ("fixed:10000001", "at most 10,000,000 tokens"), ("normal:100:1e300", "at most 10,000,000 tokens"),
    ("lognormal:100:11", "SIGMA must be at most 10"), ("file:" + "a" * 300, "cannot be read"),
])
def test_malformed_distributions_are_named(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        distributions.parse(text)


def test_file_with_garbage_is_rejected(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("10 x 20")
    with pytest.raises(ValueError, match="not a whole number"):
        distributions.parse(f"file:{path}")


def test_a_length_file_too_big_to_read_for_every_batch_is_refused(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_text("7 " * (distributions.MAX_FILE_BYTES // 2 + 1))
    with pytest.raises(ValueError, match="over 1 MiB"):
        distributions.parse(f"file:{path}")


def test_a_length_file_holding_a_sixty_digit_length_is_refused_in_one_short_line(tmp_path):
    """Issue 38: a length file's values have the same bound as a written length."""
    path = tmp_path / "lengths.txt"
    path.write_text("16 " + "1" + "0" * 59)
    with pytest.raises(ValueError, match="holds a length over 10,000,000 tokens"):
        distributions.parse(f"file:{path}")
    found = problems({"model": "tiny", "prompt_len": f"file:{path}"})
    assert "over 10,000,000 tokens" in found["prompt_len"] and len(found["prompt_len"]) < 200
