"""Routing and the `[notify]` section, tested directly (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workflow.classify.taxonomy import RiskClass, Severity
from workflow.notify.config import NotifyConfig, with_url
from workflow.notify.routing import Routed, channels_for

CONFIG = NotifyConfig.model_validate(
    {
        "channels": {
            "pager": {"url": "https://pager.example.com/hook"},
            "team": {"url": "slack://T000/B000/XXXX"},
            "dba": {"url": "ntfy://ntfy.example.com/dba"},
        },
        "routes": [
            {"workspaces": ["production"], "channels": ["pager"]},
            {"risk_classes": ["write_local", "exec"], "channels": ["team"]},
            {"roles": ["dba"], "channels": ["dba"], "events": ["held", "escalated"]},
            {"min_severity": "critical", "channels": ["pager"]},
        ],
    }
)


def routed(
    workspace: str = "default",
    risk: str = "write_local",
    severity: str = "medium",
    roles: tuple[str, ...] = (),
    event: str = "held",
) -> Routed:
    return Routed(event, workspace, RiskClass(risk), Severity(severity), roles)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (routed(), ["team"]),
        (routed("production"), ["pager", "team"]),
        (routed(risk="egress"), []),
        (routed(risk="egress", roles=("dba", "lead")), ["dba"]),
        (routed(risk="egress", roles=("dba",), event="outcome"), []),
        (routed(risk="egress", severity="critical"), ["pager"]),
        (routed("production", severity="critical"), ["pager", "team"]),
    ],
)
def test_each_route_that_matches_adds_its_channels_once(item: Routed, expected: list[str]) -> None:
    assert channels_for(CONFIG, item) == expected


def test_an_escalation_step_routes_by_the_role_it_pages_and_adds_channels() -> None:
    item = routed(risk="egress")
    assert channels_for(CONFIG, item, roles=["dba"]) == ["dba"]
    assert channels_for(CONFIG, item, also=["pager", "nonexistent"]) == ["pager"]


def test_without_routes_every_channel_gets_every_event() -> None:
    config = NotifyConfig.model_validate(
        {"channels": {"a": {"url": "https://a"}, "b": {"url": "json://b"}}}
    )
    assert channels_for(config, routed(event="outcome")) == ["a", "b"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"channels": {"a": {}}}, "exactly one of url or url_env"),
        ({"channels": {"a": {"url": "https://x", "url_env": "X"}}}, "exactly one of url"),
        ({"channels": {"a": {"url": "hooks.example.com"}}}, "is not a URL"),
        (
            {"channels": {"a": {"url": "slack://x", "kind": "apprise", "secret_env": "S"}}},
            "apprise URL carries",
        ),
        (
            {"channels": {"a": {"url": "https://x"}}, "routes": [{"channels": ["b"]}]},
            "names the channel 'b'",
        ),
        ({"channels": {"a": {"url": "https://x", "colour": "red"}}}, "Extra inputs"),
        ({"routes": [{"channels": []}]}, "at least 1 item"),
    ],
)
def test_a_wrong_notify_section_says_what_is_wrong(
    section: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        NotifyConfig.model_validate(section)


def test_notify_url_adds_a_channel_that_gets_everything_even_with_routes() -> None:
    config = with_url(CONFIG, "https://hooks.example.com/x", secret_env="HEADGATE_NOTIFY_SECRET")
    assert config.channels["cli"].secret_env == "HEADGATE_NOTIFY_SECRET"
    assert channels_for(config, routed(risk="egress", event="outcome")) == ["cli"]
    apprise = with_url(None, "ntfy://ntfy.example.com/topic", secret_env="HEADGATE_NOTIFY_SECRET")
    assert apprise.channels["cli"].secret_env is None
    assert channels_for(apprise, routed()) == ["cli"]


def test_backoff_doubles_and_is_capped() -> None:
    config = NotifyConfig(backoff=1.5)
    assert [config.delay(n) for n in (1, 2, 3, 4, 10)] == [1.5, 3.0, 6.0, 12.0, 60.0]
