"""The one seeded workload: the prompt ids and lengths every mode draws are the ones its runs were made
with before the workload had one home (the values below came from the old Sweep._batch and
continuous_sweep.workload), so greedy tokens of old and new runs agree."""
from __future__ import annotations

import hashlib
import json

from runners.spec import validate
from runners.workload import workload

LENGTHS = {"model": "tiny", "prompt_len": "uniform:3:9", "output_len": "uniform:1:5", "seed": 3}
STATIC = validate({**LENGTHS, "batch_sizes": "1,4", "warmup": 1, "repeats": 2})
CONTINUOUS = validate({**LENGTHS, "mode": "continuous", "engine": "fast", "concurrency": 2, "num_requests": 5})


def drawn(batch) -> list:
    return [batch.prompt_ids, batch.output_lens]


def test_static_and_continuous_draw_the_requests_they_always_drew() -> None:
    assert drawn(workload.draw(STATIC, 4, 0, 512, workload.STATIC)) == [
        [[254, 391, 249, 219, 378, 194], [56, 148, 94], [287, 162, 325], [159, 394, 439, 463, 490, 207, 138, 246]],
        [5, 3, 1, 4]]
    assert drawn(workload.draw(CONTINUOUS, 5, 0, 512, workload.CONTINUOUS)) == [
        [[116, 151, 112, 229], [258, 370, 441, 199], [349, 476, 369, 425, 393, 241, 72, 337],
         [474, 318, 126, 72, 166, 35, 16], [93, 370, 41, 326, 359]],
        [1, 1, 4, 3, 5]]
    # the draws a 3-repeat spec always ran; draws past them (measuring until known) are new ones
    every = {"static": {f"{b}:{r}": drawn(workload.draw(STATIC, b, r, 512, workload.STATIC))
                        for b in (1, 4) for r in range(-STATIC.warmup, STATIC.repeats)},
             "continuous": {str(r): drawn(workload.draw(CONTINUOUS, 5, r, 512, workload.CONTINUOUS))
                            for r in range(-CONTINUOUS.warmup, CONTINUOUS.repeats)}}
    digest = hashlib.sha256(json.dumps(every, sort_keys=True).encode()).hexdigest()
    assert digest == "1fc8414ebf21b230d4793aa27599864df107c7c6216a9a10a2f5ffd6991e8bb0"


def test_each_batch_size_and_repeat_draws_its_own_prompts_and_arrivals_keep_their_seed() -> None:
    first = workload.draw(STATIC, 4, 0, 512, workload.STATIC).prompt_ids[0]
    assert first != workload.draw(STATIC, 1, 0, 512, workload.STATIC).prompt_ids[0]
    assert first != workload.draw(STATIC, 4, 1, 512, workload.STATIC).prompt_ids[0]
    assert workload.arrival_seed(CONTINUOUS, 2) == 3 * 7919 + 2
