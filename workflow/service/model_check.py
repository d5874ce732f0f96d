"""Layer 7 of the classifier, the I/O half: ask an OpenAI-compatible model about a command.

Off unless configured. Only shell tools and exec classifications are checked. The model sees
the command, cwd and shell only (see `workflow.classify.model.build_request`); its answer can
only raise the classification, and any failure leaves it unchanged with a reason saying so.
"""

from __future__ import annotations

import os

import httpx

from workflow.classify.model import ModelClassifierConfig, build_request, merge_model_answer
from workflow.classify.taxonomy import RiskClass
from workflow.messages import Classification, Proposal


def _applies(proposal: Proposal, classification: Classification) -> bool:
    return classification.risk_class is RiskClass.EXEC or any(
        r.rule.startswith("shell.") for r in classification.reasons
    )


async def model_check(
    proposal: Proposal,
    classification: Classification,
    config: ModelClassifierConfig,
    client: httpx.AsyncClient | None = None,
) -> Classification:
    """The classification, possibly raised by the model's answer."""
    if not config.enabled or not _applies(proposal, classification):
        return classification
    headers = {}
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if not key:
            return merge_model_answer(
                classification, None, f"the variable {config.api_key_env} holding its key is unset"
            )
        headers["Authorization"] = f"Bearer {key}"
    url = config.base_url.rstrip("/") + "/v1/chat/completions"
    body = build_request(proposal, config)
    own = client is None
    http = client or httpx.AsyncClient()
    try:
        response = await http.post(url, json=body, headers=headers, timeout=config.timeout_seconds)
    except httpx.TimeoutException:
        return merge_model_answer(
            classification, None, f"no answer within {config.timeout_seconds:g} s"
        )
    except httpx.HTTPError as exc:
        return merge_model_answer(classification, None, f"the request failed: {type(exc).__name__}")
    finally:
        if own:
            await http.aclose()
    if response.status_code != 200:
        return merge_model_answer(
            classification, None, f"the server answered HTTP {response.status_code}"
        )
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return merge_model_answer(classification, None, "the response was not a chat completion")
    if not isinstance(content, str):
        return merge_model_answer(classification, None, "the completion carried no text")
    return merge_model_answer(classification, content, None)
