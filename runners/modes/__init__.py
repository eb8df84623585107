"""How each sweep mode runs a point: one module per mode (static, continuous, endpoint) behind runners.modes.base.Mode,
all working through the public PointContext. Sweep looks its mode up here and never branches on it."""
from __future__ import annotations

from runners.modes import continuous, endpoint, static
from runners.modes.base import Mode

MODES: dict[str, Mode] = {"static": static, "continuous": continuous, "endpoint": endpoint}
