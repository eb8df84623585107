"""The paged decode kernel's launch choice for the rows it is given (no GPU needed: a pure rule)."""
from __future__ import annotations

import pytest

pytest.importorskip("triton")

from runners.engines.kernels.paged_kernels import Config, config_for  # noqa: E402


def test_few_rows_get_shorter_spans_until_every_sm_has_four_programs() -> None:
    # 8 KV heads over 2 624 positions on an H100's 132 SMs (528 programs wanted): spans of 512, 256 and 128
    # tokens make 6, 11 and 21 a row
    assert config_for(1, 8, 2624, 132).split == 128  # 48, 88, 168: never enough, so the shortest span
    assert config_for(4, 8, 2624, 132).split == 128  # 192, 352, then 672
    assert config_for(8, 8, 2624, 132).split == 256  # 384, then 704
    assert config_for(16, 8, 2624, 132) == Config()  # 768 at once: the measured default, unchanged
    assert config_for(128, 8, 2624, 132) == Config()


def test_a_gpu_with_fewer_sms_keeps_longer_spans() -> None:
    assert config_for(4, 8, 2624, 48).split == 512  # 192 programs cover 48 SMs four times
    assert config_for(1, 8, 2624, 16).split == 256  # 48 programs are fewer than 64, 88 are not
