"""The telemetry layer: the background GPU/CPU sampler, the measured roofline ceilings and the environment
fingerprint stored with every run."""
