"""Linear role names: what users pick targets by, and the groups they name.

Every family's decoder layer is described by the same seven roles (q, k, v, o, gate, up,
down); a family without a gate (OPT's fc1/fc2 MLP) simply lacks that role. Plain names
only, so configs and forms validate targets without torch (``core.adapters.roles`` holds
the modules that view a role inside a fused projection).
"""

from __future__ import annotations

from core.errors import ConfigError

ROLES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
# Named groups users pick from ("which linears to prune").
ROLE_GROUPS: dict[str, tuple[str, ...]] = {
    "all": ROLES,
    "attention": ("q", "k", "v", "o"),
    "mlp": ("gate", "up", "down"),
    "qk": ("q", "k"),
}
# Linears that read the same tensor share one set of input statistics.
SHARED_INPUT: dict[str, str] = {"k": "q", "v": "q", "up": "gate"}


def resolve_roles(targets: str) -> tuple[str, ...]:
    """'all' | 'attention' | 'mlp' | 'qk' | comma list of roles -> ordered roles."""
    if targets in ROLE_GROUPS:
        return ROLE_GROUPS[targets]
    roles = tuple(r.strip() for r in targets.split(",") if r.strip())
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ConfigError(
            f"unknown linear role(s) {bad or targets!r}; use one of {sorted(ROLE_GROUPS)} "
            f"or a comma list of {list(ROLES)}"
        )
    return tuple(r for r in ROLES if r in roles)
