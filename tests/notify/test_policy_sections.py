"""`[notify]` and `[approval.escalation]` in a policy file: loaded, and wrong ones refused with
the file, the key and what is wrong."""

from __future__ import annotations

import pytest

from workflow.policy.load import load_policy_text
from workflow.policy.problems import PolicyValidationError

SECTIONS = """
[approval]
quorum = 1

[approval.escalation]
steps = [
  { after = "15m", action = "remind" },
  { after = "30m", action = "notify", roles = ["lead"], channels = ["pager"] },
  { after = "1h", action = "expire" },
]

[notify]
inbox_url = "https://headgate.example.com"
attempts = 4
[notify.channels.pager]
url = "https://hooks.example.com/pager"
secret_env = "PAGER_SECRET"
[notify.channels.team]
url_env = "TEAM_SLACK"
[[notify.routes]]
workspaces = ["production"]
channels = ["pager"]
"""


def test_the_sections_load_into_the_policy() -> None:
    policy = load_policy_text(SECTIONS, "p.toml")
    assert [s.action for s in policy.approval.escalation.steps] == ["remind", "notify", "expire"]
    assert policy.approval.escalation.steps[1].after == 1800
    assert policy.approval.quorum == 1
    assert set(policy.notify.channels) == {"pager", "team"}
    assert policy.notify.routes[0].workspaces == ["production"]
    assert policy.notify.attempts == 4
    # They are part of the policy's identity: a change is a new revision.
    other = load_policy_text(SECTIONS.replace("attempts = 4", "attempts = 5"), "p.toml")
    assert other.revision != policy.revision


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SECTIONS.replace('channels = ["pager"] }', 'channels = ["pagr"] }'), "'pagr'"),
        (
            SECTIONS.replace(
                '"production"]\nchannels = ["pager"]', '"production"]\nchannels = ["x"]'
            ),
            "'x'",
        ),
        (SECTIONS.replace('"1h", action = "expire"', '"10m", action = "expire"'), "order"),
        (SECTIONS.replace("attempts = 4", "attempts = 0"), "notify.attempts"),
        (SECTIONS.replace('url_env = "TEAM_SLACK"', 'url_env = "TEAM SLACK"'), "url_env"),
    ],
)
def test_a_wrong_section_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PolicyValidationError, match=message) as caught:
        load_policy_text(text, "p.toml")
    assert "p.toml" in str(caught.value)
