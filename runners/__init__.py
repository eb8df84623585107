"""BatchScope's measurement side: headless sweeps on CPU or CUDA that write run folders."""
