"""The endpoint engine's pure parts, on hand-written input with hand-checked answers: server-sent events,
completion and chat chunks, token times, request bodies, a repeat's rows with its failed requests counted,
the spec, and what `runners serve` accepts in a body."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from runners.engines.endpoint import SERVER_STAMPS, Capabilities, Clock, Outcome, Served, request_body
from runners.engines.sse import CompletionStream, EventParser, token_times
from runners.metrics.endpoint import endpoint_repeat, summarise, ttft_parts
from runners.results.schemas import TTFT_PARTS
from runners.serving.serve_body import BadRequest, Parsed, parse
from runners.spec import points, problems, validate
from runners.spec.endpoint import server_argv
from runners.workload.workload import TEXT_WORDS, text_prompt

PIECES = [  # (when the bytes arrived, the bytes): the é is sent as its two UTF-8 bytes
    (0.0, ': a comment line\r\ndata: {"choices":[{"index":0,"text":" caf\xc3\xa9","finish_reason":null}]}\r\n\r\n'),
    (1.0, 'event: completion\ndata: {"choices":[{"index":0,"text":"","finish_reason":null}]}\n\n'),
    (2.0, 'data: {"choices":[{"index":0,"text":" 3","finish_reason":"length"}]}\r\r'
          'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n'),
    (3.0, 'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n'),
    (4.0, 'data: [DONE]\n\n'),
]
STREAM = "".join(text for _, text in PIECES).encode("latin-1")


def test_events_survive_any_split_of_the_bytes_even_inside_a_character() -> None:
    whole = EventParser().feed(STREAM)
    parser = EventParser()
    one_by_one = [event for i in range(len(STREAM)) for event in parser.feed(STREAM[i:i + 1])]
    assert one_by_one == whole
    assert len(whole) == 6 and whole[-1] == "[DONE]"
    assert '" café"' in whole[0]  # the comment and the event: field are not data
    assert EventParser().feed(b"data: a\ndata: b\n\ndata: unfinished\n") == ["a\nb"]  # lines join; no blank, no event


def test_a_stream_counts_token_chunks_and_times_each_when_its_bytes_arrived() -> None:
    stream = CompletionStream()
    for t, text in PIECES:
        stream.feed(text.encode("latin-1"), t)
    # the " café" chunk at t=0, the empty-text token at 1 (a detokenizer holding back bytes), " 3" and its
    # empty closing chunk together at t=2 (only the first counts), usage at 3, [DONE] at 4
    assert stream.chunk_s == [0.0, 1.0, 2.0]
    assert (stream.count("prompt_tokens"), stream.count("completion_tokens")) == (5, 3)
    assert stream.failure() is None


@pytest.mark.parametrize("tail, failure", [
    (b"", "truncated stream"),  # no [DONE]: the connection ended early
    (b'data: {"error":{"message":"engine died"}}\n\ndata: [DONE]\n\n', "server error in stream"),
    (b"data: [DONE]\n\n", "no tokens"),
])
def test_a_stream_that_is_not_a_whole_completion_says_why(tail: bytes, failure: str) -> None:
    stream = CompletionStream()
    stream.feed((b'data: {"choices":[{"text":" a"}]}\n\n' if failure != "no tokens" else b"") + tail, 0.0)
    assert stream.failure() == failure


def test_token_times_are_the_chunks_or_spread_when_a_chunk_carried_several() -> None:
    assert token_times([1.0, 2.0, 4.0], 3) == [1.0, 2.0, 4.0]
    assert token_times([1.0, 4.0], 4) == [1.0, 2.0, 3.0, 4.0]  # 2 chunks, 4 tokens: evenly from first to last
    assert token_times([1.0], 1) == [1.0]


def outcome(index: int, arrival: float, sent: float, chunks: list[float], error: str | None = None,
            usage: tuple[int, int] | None = None) -> Outcome:
    o = Outcome(index, arrival, sent, end_s=(chunks[-1] if chunks else sent) + 0.001, chunk_s=chunks, error=error,
                detail="refused by 127.0.0.1:1" if error == "connection refused" else "")
    if usage:
        o.prompt_tokens, o.completion_tokens = usage
    return o


def test_a_repeat_keeps_finished_requests_and_counts_the_failed_ones_by_kind() -> None:
    served = Served([
        outcome(0, 0.0, 0.0, [0.100, 0.110, 0.130], usage=(7, 3)),  # TTFT 100 ms, gaps 10 and 20 ms
        outcome(1, 0.050, 0.051, [0.450, 0.460]),  # no usage: the drawn prompt, 2 chunks of 4 asked; TTFT 400 ms
        outcome(2, 0.060, 0.060, [], error="connection refused"),
        outcome(3, 0.070, 0.070, [0.200], error="truncated stream"),
    ], start=100.0)
    rep = endpoint_repeat(4, 0, 2, served, [9, 11, 13, 15], [3, 4, 5, 6], "ttft", 300.0)
    rows = {r["request_index"]: r for r in rep.requests}
    assert sorted(rows) == [0, 1]
    assert (rows[0]["prompt_len"], rows[0]["output_len"], rows[0]["generated_len"]) == (7, 3, 3)
    # the server ended request 1 early (its length not forced): asked 4, generated 2
    assert (rows[1]["prompt_len"], rows[1]["output_len"], rows[1]["generated_len"]) == (11, 4, 2)
    assert rows[0]["ttft_ms"] == pytest.approx(100.0) and rows[1]["ttft_ms"] == pytest.approx(400.0)
    assert rows[0]["e2e_ms"] == pytest.approx(130.0) and rows[0]["queue_ms"] is None
    assert sorted(rep.itl) == pytest.approx([10.0, 10.0, 20.0])
    assert rep.failed == Counter({"connection refused": 1, "truncated stream": 1}) and rep.sent == 4
    wall_s = 0.461  # the last byte of request 1
    assert rep.row["wall_ms"] == pytest.approx(wall_s * 1e3)
    assert rep.row["output_tokens"] == 5 and rep.row["requests_per_s"] == pytest.approx(2 / wall_s)
    assert rep.goodput_rps == pytest.approx(1 / wall_s)  # only request 0 met TTFT ≤ 300 ms
    in_flight = (0.131 - 0.0) + (0.461 - 0.051) + (0.061 - 0.060) + (0.201 - 0.070)
    assert rep.in_flight == pytest.approx(in_flight / wall_s)
    out = summarise(4, 2, [rep, rep], 1, "ttft", 300.0)
    assert out["status"] == "ok" and out["outlier_steps"] is None and out["prefill_tokens_per_s"] is None
    assert out["output_len_mean"] == pytest.approx(2.5)  # the tokens generated, over which throughput is
    assert out["error"] == ("4 of 8 requests failed: connection refused ×2, truncated stream ×2 "
                            "(first: connection refused: refused by 127.0.0.1:1)")
    assert out["ttft_ms_p50"] == pytest.approx(250.0)


def test_an_endpoint_repeat_rates_output_over_its_load_window_failed_arrivals_included() -> None:
    served = Served([
        outcome(0, 0.000, 0.000, [0.010, 0.020, 0.030]),
        outcome(1, 0.015, 0.015, [], error="connection refused"),  # sent, so part of the load
        outcome(2, 0.025, 0.025, [0.040, 0.050]),
    ], start=0.0)
    rep = endpoint_repeat(0, 0, 3, served, [4, 4, 4], [3, 3, 2], "ttft", 1000.0)
    # window (10, 25] ms: only request 0's token at 20 ms lies in it; the rest come after the last arrival
    assert (rep.row["loaded_start_ms"], rep.row["loaded_end_ms"]) == pytest.approx((10.0, 25.0))
    assert rep.row["loaded_output_tokens"] == 1 and rep.row["output_tokens_per_s"] == pytest.approx(1 / 0.015)
    assert rep.row["requests_per_s"] == pytest.approx(2 / 0.051)  # the wall: the last byte at 51 ms
    # its latencies count request 2 alone: request 0 arrived before the first token
    assert [r["latency_counted"] for r in rep.requests] == [False, True]
    assert [r["arrival_ms"] for r in rep.requests] == pytest.approx([0.0, 25.0])
    assert rep.itl == pytest.approx([10.0])
    assert summarise(0, 3, [rep], 0, "ttft", 1000.0)["latency_requests"] == 1


def test_when_only_a_failed_request_arrived_inside_the_window_every_finished_one_counts() -> None:
    served = Served([
        outcome(0, 0.000, 0.000, [0.010, 0.020, 0.030]),
        outcome(1, 0.000, 0.000, [0.012, 0.022]),
        outcome(2, 0.025, 0.025, [], error="HTTP 503"),  # the window's end: (10, 25] ms
    ], start=0.0)
    rep = endpoint_repeat(0, 0, 3, served, [4, 4, 4], [3, 2, 2], "ttft", 1000.0)
    assert rep.row["loaded_output_tokens"] == 3  # at 12, 20 and 22 ms
    assert [r["latency_counted"] for r in rep.requests] == [True, True]  # not a point without latencies
    out = summarise(0, 3, [rep], 0, "ttft", 1000.0)
    assert out["latency_requests"] == 2 and out["ttft_ms_p50"] == pytest.approx(11.0)


def test_a_requests_ttft_splits_at_each_timestamp_into_parts_that_add_up_to_it() -> None:
    o = outcome(0, 0.010, 0.011, [0.100, 0.110])  # due at 10 ms, sent at 11, first chunk parsed at 100
    # the server's stamps on the repeat's clock: received, submitted, handed, admitted, first token, flushed
    o.server = dict(zip(SERVER_STAMPS, [0.012, 0.013, 0.020, 0.020, 0.090, 0.095]))
    parts = ttft_parts(o)
    assert list(parts) == list(TTFT_PARTS)
    assert [round(v, 6) for v in parts.values()] == [1.0, 1.0, 1.0, 7.0, 0.0, 70.0, 5.0, 5.0]
    served = Served([o, outcome(1, 0.0, 0.0, [0.05, 0.06])], start=0.0, clock=Clock(0.0, 0.0004))
    rep = endpoint_repeat(0, 0, 2, served, [4, 4], [2, 2], "ttft", 1000.0)
    rows = {r["request_index"]: r for r in rep.requests}
    assert sum(rows[0][p] for p in TTFT_PARTS) == pytest.approx(rows[0]["ttft_ms"]) == pytest.approx(90.0)
    assert all(rows[1][p] is None for p in TTFT_PARTS)  # no server times (not runners serve): no parts
    out = summarise(0, 2, [rep], 0, "ttft", 1000.0)
    assert out["ttft_prefill_ms_p50"] == pytest.approx(70.0) and out["clock_error_ms"] == pytest.approx(0.4)


def test_a_repeat_with_no_finished_request_is_an_error() -> None:
    served = Served([outcome(0, 0.0, 0.0, [], error="HTTP 503"), outcome(1, 0.0, 0.0, [], error="HTTP 503")], 0.0)
    with pytest.raises(RuntimeError, match=r"all 2 requests failed: 2 of 2 requests failed: HTTP 503 ×2"):
        endpoint_repeat(0, 0, 1, served, [4, 4], [2, 2], "ttft", 1000.0)


def test_the_endpoint_engine_takes_the_endpoint_mode_and_sweeps_the_load() -> None:
    spec = validate({"model": "tiny", "engine": "endpoint", "arrival": "poisson:1,2"})
    assert spec.mode == "endpoint" and spec.url == "http://127.0.0.1:8000/v1"
    assert [(p.axis, p.value, p.batch_size) for p in points(spec)] == [("arrival_rate", 1.0, 0), ("arrival_rate", 2.0, 0)]
    assert "mode" in problems({"model": "tiny", "engine": "endpoint", "mode": "continuous", "concurrency": 2})
    assert "engine" in problems({"model": "tiny", "engine": "fast", "mode": "endpoint", "concurrency": 2})
    assert problems({"model": "tiny", "engine": "endpoint"})["arrival"].startswith("endpoint mode needs a load")


@pytest.mark.parametrize("changes, field", [
    ({"url": "ftp://host/v1"}, "url"),
    ({"url": "http://me:secret@host:8000/v1"}, "url"),  # a key goes through api_key_env, never the URL
    ({"api_key_env": "sk-abc123"}, "api_key_env"),
    ({"max_num_seqs": "8,16"}, "max_num_seqs"),  # only a restarted server takes a new limit
    ({"server_command": "vllm serve m --max-num-seqs {max_seqs}"}, "server_command"),
    ({"server_command": "vllm serve 'unclosed"}, "server_command"),
    ({"prompt_format": "tokens"}, "prompt_format"),
    ({"request_timeout_s": 0}, "request_timeout_s"),
    ({"request_timeout_s": [1]}, "request_timeout_s"),
    ({"url": "http://[::1"}, "url"),  # an unclosed IPv6 address
])
def test_bad_endpoint_options_are_named_by_their_field(changes: dict, field: str) -> None:
    assert field in problems({"model": "tiny", "engine": "endpoint", "concurrency": 4, **changes})


def test_a_server_command_becomes_an_argv_per_point_with_no_shell_in_between() -> None:
    spec = validate({"model": "tiny", "engine": "endpoint", "concurrency": 4, "max_num_seqs": "2,8",
                     "max_num_batched_tokens": 512,
                     "server_command": "vllm serve m --max-num-seqs {max_num_seqs} --max-num-batched-tokens "
                                       "{max_num_batched_tokens} --tag '$(rm -rf ~); {max_num_seqs}' --cfg '{\"a\": 1}'"})
    planned = points(spec)
    assert [(p.axis, p.max_num_seqs, p.batch_size) for p in planned] == [("max_num_seqs", 2, 2), ("max_num_seqs", 8, 8)]
    assert server_argv(spec, planned[1]) == ["vllm", "serve", "m", "--max-num-seqs", "8", "--max-num-batched-tokens",
                                             "512", "--tag", "$(rm -rf ~); 8", "--cfg", '{"a": 1}']


def test_a_text_prompt_has_one_word_per_drawn_token_picked_by_its_id() -> None:
    ids = [0, 1, len(TEXT_WORDS), 2 * len(TEXT_WORDS) + 5]
    assert text_prompt(ids).split(" ") == [TEXT_WORDS[0], TEXT_WORDS[1], TEXT_WORDS[0], TEXT_WORDS[5]]
    assert len(set(TEXT_WORDS)) == len(TEXT_WORDS) and all(w.isalpha() and w.islower() for w in TEXT_WORDS)


CHAT = [  # vLLM's shape: the role first with empty content, a token split over two reads, usage, [DONE]
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":" the"},"finish_reason":null}]}\n\ndata: {"choi',
    b'ces":[{"index":0,"delta":{"content":""},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":" of"},"finish_reason":"length"}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":3}}\n\n',
]


def test_a_chat_stream_times_content_deltas_and_not_the_role() -> None:
    stream = CompletionStream(chat=True)
    for t, raw in enumerate(CHAT):
        stream.feed(raw, float(t))
    # the role at 0 carries no token; " the" at 1, the held-back empty piece at 2, " of" at 3; the closing
    # delta with usage carries none
    assert stream.chunk_s == [1.0, 2.0, 3.0]
    assert (stream.count("prompt_tokens"), stream.count("completion_tokens")) == (9, 3)
    # transformers serve ends here, without [DONE]: whole once a finish_reason came, unless [DONE] is expected
    assert stream.failure(done_marker=False) is None and stream.failure() == "truncated stream"
    cut = CompletionStream(chat=True)
    cut.feed(b"".join(CHAT[:3]), 0.0)
    assert cut.failure(done_marker=False) == "truncated stream"  # no finish_reason: the connection ended early
    as_text = CompletionStream()  # the same stream read as completions has no `text`: no token at all
    as_text.feed(b"".join(CHAT), 0.0)
    assert as_text.chunk_s == []


def caps(**changes: object) -> Capabilities:
    return replace(Capabilities("completions", "ids", "ignore_eos", True, "server", "[DONE]"), **changes)


def test_a_request_carries_only_the_fields_the_server_took() -> None:
    assert request_body(caps(), "m", [5, 6], 4, True, "run/p0/r0/1") == {
        "model": "m", "max_tokens": 4, "temperature": 0.0, "stream": True, "prompt": [5, 6], "ignore_eos": True,
        "stream_options": {"include_usage": True}, "user": "run/p0/r0/1"}
    chat = request_body(caps(api="chat", prompt="text", length="min_tokens", stream_options=False), "m", "the of", 4, True)
    assert chat == {"model": "m", "max_tokens": 4, "temperature": 0.0, "stream": True,
                    "messages": [{"role": "user", "content": "the of"}], "min_tokens": 4}
    strict = request_body(caps(length="none", stream_options=False), "m", "the", 2, False)
    assert set(strict) == {"model", "max_tokens", "temperature", "stream", "prompt"}
    assert caps(api="chat", prompt="text", length="none", end="end of stream", prompt_tokens_added=2).describe() == (
        "chat API, prompts as text, output lengths not forced, usage from the stream, streams end at end of "
        "stream, the server counts +2 prompt tokens over those sent")


@pytest.mark.parametrize("changes, field", [
    ({"api": "responses"}, "api"),
    ({"api": "chat", "prompt_format": "ids"}, "prompt_format"),  # chat messages are text
])
def test_the_api_option_is_checked(changes: dict, field: str) -> None:
    assert field in problems({"model": "tiny", "engine": "endpoint", "concurrency": 4, **changes})
    assert validate({"model": "tiny", "engine": "endpoint", "concurrency": 4, "api": "chat"}).api == "chat"


@pytest.mark.parametrize("body, param", [
    ({"prompt": [1], "temperature": "hot"}, "temperature"),
    ({"prompt": [1], "max_tokens": 2.5}, "max_tokens"),
    ({"prompt": [1], "stream": "yes"}, "stream"),
    ({"prompt": [1], "logprobs": 2}, "logprobs"),  # unsupported: refused, never ignored
    ({"prompt": [1], "stop": ["\n"]}, "stop"),
    ({"prompt": [1], "stream_options": {"include_usage": 1}}, "stream_options"),
    ({"prompt": [1], "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
    ({"prompt": "the zebra"}, "prompt"),  # not a word the preset maps
    ({"messages": [{"role": "user", "content": "the"}]}, "messages"),  # a chat field on completions
])
def test_runners_serve_refuses_a_completions_field_by_name(body: dict, param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse(body, "completions", "tiny", 512, None)
    assert refused.value.param == param and refused.value.status == 400 and param in str(refused.value)


@pytest.mark.parametrize("messages, param", [
    ([{"role": "user", "content": ["the"]}], "messages[0].content"),
    ([{"role": "robot", "content": "the"}], "messages[0].role"),
    ([{"role": "user", "content": "the", "name": "x"}], "messages[0]"),
    ([], "messages"),
])
def test_runners_serve_refuses_a_chat_message_by_name(messages: list, param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse({"messages": messages}, "chat", "tiny", 512, None)
    assert refused.value.param == param


def test_runners_serve_reads_a_presets_text_as_ids_and_workload_words() -> None:
    sent = {"model": "tiny", "messages": [{"role": "system", "content": "7 the"},
                                          {"role": "user", "content": text_prompt([3, 1, 505])}],
            "max_completion_tokens": 5, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True, "min_tokens": 5, "temperature": 0, "user": "t"}
    assert parse(sent, "chat", "tiny", 512, None) == Parsed([7, 0, 3, 1, 505 % len(TEXT_WORDS)], 5, True, True, "t")
    assert parse({"prompt": "12 of"}, "completions", "tiny", 512, None) == Parsed([12, 1], 16, False, True, None)
    assert parse({"prompt": [3, 4], "stream": True}, "completions", "tiny", 512, None).usage is False
