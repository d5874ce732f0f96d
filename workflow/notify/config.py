"""`[notify]` in the policy file: channels, routes, and how hard to try a channel that is down.

```toml
[notify]
inbox_url = "https://headgate.example.com"     # links in the messages point here

[notify.channels.ops]                          # a generic webhook: JSON, HMAC-signed
url = "https://hooks.example.com/headgate"
secret_env = "HEADGATE_OPS_SECRET"

[notify.channels.team]                         # any apprise URL: Slack, Teams, ntfy, e-mail…
url_env = "HEADGATE_TEAM_SLACK"                # the URL holds a token: keep it out of the file

[[notify.routes]]                              # production calls page the leads
workspaces = ["production"]
channels = ["ops"]
[[notify.routes]]                              # routine writes go to the team
risk_classes = ["write_local"]
channels = ["team"]
```

Without routes every channel gets every event. Pure: reading an environment variable happens
when a channel is opened (`channels.open_channel`), not here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workflow.classify.taxonomy import RiskClass, Severity

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
EnvName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Role = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
Event = Literal["held", "outcome", "escalated"]
EVENTS: tuple[Event, ...] = ("held", "outcome", "escalated")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChannelSpec(_Strict):
    """One destination. `kind` defaults to `webhook` for http(s) URLs, `apprise` otherwise."""

    kind: Literal["webhook", "apprise"] | None = None
    url: str | None = Field(default=None, min_length=3, max_length=2000)
    url_env: EnvName | None = Field(default=None, description="Read the URL from this variable.")
    secret: str | None = Field(
        default=None, min_length=16, description="HMAC key of a webhook (prefer secret_env)."
    )
    secret_env: EnvName | None = Field(
        default=None,
        description="Read the HMAC key from this variable (unset: the data dir's notify key).",
    )

    @model_validator(mode="after")
    def _one_url(self) -> ChannelSpec:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("a channel needs exactly one of url or url_env")
        if self.secret is not None and self.secret_env is not None:
            raise ValueError("give the webhook secret as secret or secret_env, not both")
        if self.url is not None and "://" not in self.url:
            raise ValueError(f"{self.url!r} is not a URL (scheme://…)")
        if self.kind == "apprise" and (self.secret or self.secret_env):
            raise ValueError("secret and secret_env sign webhooks; an apprise URL carries its own")
        return self

    def kind_for(self, url: str) -> Literal["webhook", "apprise"]:
        if self.kind is not None:
            return self.kind
        return "webhook" if url.startswith(("http://", "https://")) else "apprise"


class Route(_Strict):
    """Which events go to which channels. Every filter given must match; an empty one matches
    anything. `roles` matches a request whose approvers need one of these roles."""

    channels: list[Name] = Field(min_length=1)
    workspaces: list[Annotated[str, Field(pattern=r"^(\*|[A-Za-z0-9_-]+)$")]] = Field(
        default_factory=lambda: ["*"]
    )
    risk_classes: list[RiskClass] = Field(default_factory=list)
    min_severity: Severity | None = None
    roles: list[Role] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=lambda: list(EVENTS))


class NotifyConfig(_Strict):
    inbox_url: str | None = Field(
        default=None, description="Base URL of the web inbox; messages link to the request."
    )
    channels: dict[Name, ChannelSpec] = Field(default_factory=dict)
    routes: list[Route] = Field(default_factory=list)
    attempts: Annotated[int, Field(ge=1, le=20)] = Field(
        default=6, description="Tries per channel before a delivery is recorded as failed."
    )
    backoff: Annotated[float, Field(gt=0, le=300)] = Field(
        default=1.0, description="Seconds before the second try; doubled each time (max 60 s)."
    )
    timeout: Annotated[float, Field(gt=0, le=120)] = Field(
        default=10.0, description="Seconds one try may take."
    )

    @model_validator(mode="after")
    def _routes_name_channels(self) -> NotifyConfig:
        for i, route in enumerate(self.routes):
            unknown = [c for c in route.channels if c not in self.channels]
            if unknown:
                raise ValueError(
                    f"routes[{i}] names the channel {unknown[0]!r}, which is not in "
                    f"notify.channels ({', '.join(sorted(self.channels)) or 'none defined'})"
                )
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.channels)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number `attempt` (1-based)."""
        return float(min(self.backoff * 2 ** (attempt - 1), 60.0))


#: The channel `serve --notify URL` adds.
CLI_CHANNEL = "cli"


def with_url(
    config: NotifyConfig | None, url: str, *, secret_env: str | None = None
) -> NotifyConfig:
    """`serve --notify URL`: one more channel, `cli`, that gets every event (a webhook is
    signed with the key in `secret_env`, or the data dir's key)."""
    base = config or NotifyConfig()
    spec = ChannelSpec(url=url)
    if secret_env and spec.kind_for(url) == "webhook":
        spec = ChannelSpec(url=url, secret_env=secret_env)
    routes = [*base.routes, Route(channels=[CLI_CHANNEL])] if base.routes else []
    return NotifyConfig.model_validate(
        {**base.model_dump(), "channels": {**base.channels, CLI_CHANNEL: spec}, "routes": routes}
    )
