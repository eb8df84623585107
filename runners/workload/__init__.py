"""The workload layer: the seeded requests of a sweep (lengths, prompt ids, arrivals) and the length
distributions they are drawn from. Torch-free apart from the prompt ids, so the app previews the same draw."""
