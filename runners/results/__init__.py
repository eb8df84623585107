"""The run folder layer: the contract both processes agree on, the runner's writer, the Arrow schemas of the
point files, how a sweep ended, and the terminal progress bar. Torch-free (the app reads by the contract)."""
