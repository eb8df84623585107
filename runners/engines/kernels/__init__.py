"""The custom ops the fast engines call: paged decode attention and the quantised linear, each beside the
Triton kernels that run it on CUDA (imported only there: CPU builds of torch need not ship Triton)."""
