"""How an endpoint run's requests were made, in sentences for the Run page and the report: what the
runner negotiated with the server (env.json's `endpoint`, runners/engines/negotiate.py) and what it
means for the numbers. One place, so the page and the report never say it differently."""
from __future__ import annotations

from typing import Any

LENGTHS = {"ignore_eos": "forced to their drawn lengths (ignore_eos)",
           "min_tokens": "forced to their drawn lengths (min_tokens = max_tokens)",
           "none": "not forced: the server took neither ignore_eos nor min_tokens"}


def endpoint_lines(env: dict[str, Any] | None) -> list[str]:
    """Sentences on how the requests were made, empty for a run that is not an endpoint's or that
    recorded no negotiation (made before it, or failed before its first point's setup)."""
    caps = (env or {}).get("endpoint")
    if not isinstance(caps, dict):
        return []
    api = ("chat API (each prompt's words as one user message)" if caps.get("api") == "chat"
           else "completions API")
    prompt = "token ids (exact lengths)" if caps.get("prompt") == "ids" else "text, one common word per drawn token"
    usage = "from the server's usage" if caps.get("usage") == "server" else "counted from the streamed chunks"
    end = "[DONE]" if caps.get("end") == "[DONE]" else "the connection closing (no [DONE])"
    lines = [f"Requests: {api}; prompts as {prompt}; output lengths {LENGTHS.get(caps.get('length'), '?')}; "
             f"token counts {usage}; streams end at {end}."]
    added = caps.get("prompt_tokens_added")
    if isinstance(added, int) and added:
        source = "its chat template and tokenizer" if caps.get("api") == "chat" else "its tokenizer"
        lines.append(f"Prompt lengths are the server's counts: {source} added {added:+d} tokens to an 8-word probe, "
                     f"so prompts hold that many more tokens than were drawn.")
    if caps.get("length") == "none":
        lines.append("Throughput is over the tokens the server chose to generate, not the drawn output lengths: "
                     "each request's own length is its generated_len (requests file), and output_len_mean is "
                     "their mean.")
    return lines
