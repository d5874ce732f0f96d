"""Which channels an event goes to. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workflow.classify.taxonomy import RiskClass, Severity
from workflow.notify.config import Event, NotifyConfig, Route

_SEVERITY_RANK = {s: i for i, s in enumerate(Severity)}


@dataclass(frozen=True, slots=True)
class Routed:
    """What routing looks at: the event, and the request it is about."""

    event: Event
    workspace: str
    risk_class: RiskClass
    severity: Severity
    roles: tuple[str, ...] = ()
    """The roles the request's approvers need (empty: any approver)."""


def _matches(route: Route, item: Routed, roles: Iterable[str]) -> bool:
    if item.event not in route.events:
        return False
    if "*" not in route.workspaces and item.workspace not in route.workspaces:
        return False
    if route.risk_classes and item.risk_class not in route.risk_classes:
        return False
    if (
        route.min_severity is not None
        and _SEVERITY_RANK[item.severity] < _SEVERITY_RANK[route.min_severity]
    ):
        return False
    return not route.roles or bool(set(route.roles) & set(roles))


def channels_for(
    config: NotifyConfig,
    item: Routed,
    *,
    roles: Iterable[str] | None = None,
    also: Iterable[str] = (),
) -> list[str]:
    """The channels `item` goes to, in configuration order, each once.

    Without routes, every channel. `roles` replaces the request's roles when matching (an
    escalation step that pages another role); `also` adds channels by name.
    """
    wanted = tuple(item.roles if roles is None else roles)
    if not config.routes:
        picked = list(config.channels)
    else:
        picked = [
            name
            for route in config.routes
            if _matches(route, item, wanted)
            for name in route.channels
        ]
    picked += [name for name in also if name in config.channels]
    return list(dict.fromkeys(picked))
