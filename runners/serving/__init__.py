"""`python -m runners serve`: the OpenAI-compatible server over the continuous engine, and what it accepts in a
request body."""
