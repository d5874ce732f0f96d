"""The classifications of the calls the intake held, kept for their re-check at release.

When an approval closes a request, the collector re-checks the call under the current policy
(`policy.engine.recheck`), on a fresh classification: `classify(proposal, tables)`. The intake
computed exactly that when it held the call. `classify` is deterministic, and a policy object
is never changed once loaded (a reload makes a new one), so under the same policy object and
for the same proposal (its digest) the intake's result is the fresh classification: the
collector takes it from here instead of classifying again. Anything else (another policy
object since, another process's intake, an entry evicted or never made) classifies as before.
"""

from __future__ import annotations

from collections import OrderedDict

from workflow.messages import Classification
from workflow.policy.model import Policy

#: Entries kept at most (a call leaves when its request closes through the collector; those
#: expired, or pending longer than this many others, leave oldest first).
LIMIT = 1024


class HeldClassifications:
    def __init__(self, limit: int = LIMIT):
        self._limit = limit
        self._entries: OrderedDict[str, tuple[Policy, str, Classification]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def remember(
        self, policy: Policy, proposal_id: str, digest: str, classification: Classification
    ) -> None:
        """What `classify` gave for this proposal under `policy` (before any model check)."""
        self._entries[proposal_id] = (policy, digest, classification)
        self._entries.move_to_end(proposal_id)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)

    def recall(self, policy: Policy, proposal_id: str, digest: str) -> Classification | None:
        """The classification remembered for this proposal under this very policy object;
        None when there is none (the entry leaves either way)."""
        entry = self._entries.pop(proposal_id, None)
        if entry is None:
            return None
        remembered_policy, remembered_digest, classification = entry
        if remembered_policy is not policy or remembered_digest != digest:
            return None
        return classification
