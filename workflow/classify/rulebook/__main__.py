"""`python -m workflow.classify.rulebook > docs/rules.md`."""

from __future__ import annotations

import sys

from workflow.classify.rulebook import RULEBOOK, render_markdown

sys.stdout.write(render_markdown(RULEBOOK.values()))
