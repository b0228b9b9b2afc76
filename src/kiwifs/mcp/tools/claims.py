"""The MCP tools of KiwiFS's task claims: claim a task file, release it, list every live claim
(episodes' claims included), and the tasks eligible to claim.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field

from kiwifs.base.limits import MCP_ELIGIBLE_LIMIT
from kiwifs.knowledge import Knowledge
from kiwifs.mcp.render import render_eligible
from kiwifs.mcp.tools.common import NUMBER, number
from kiwifs.memory.render import render_claims


class ClaimTools:
    """Tools over the task claims of one root (``kb``, set by :class:`kiwifs.mcp.tools.Tools`)."""

    kb: Knowledge

    def kiwi_claim(
        self,
        path: Annotated[str, Field(description="Path to the task file.")],
        actor: Annotated[
            str, Field(description="Your agent identity (unique session id or name).")
        ],
        lease_duration: Annotated[
            str, Field(description="How long the claim lasts: '15m', '1h' (1m to 24h).")
        ] = "30m",
    ) -> str:
        """Claim a task file for exclusive work; fails if another agent holds it. Claiming
        again renews your lease. The claim is written into the file's frontmatter."""
        claim = self.kb.claim(path, actor, lease_duration)
        return json.dumps(claim.to_json(), ensure_ascii=False)

    def kiwi_release(
        self,
        path: Annotated[str, Field(description="Path to the task file.")],
        actor: Annotated[str, Field(description="The identity you claimed it with.")],
    ) -> str:
        """Release a claimed task so other agents can work on it."""
        rel = self.kb.release(path, actor)
        return f"Released claim on {rel}"

    def kiwi_claims_list(self) -> str:
        """Every active claim (tasks and episodes): which path, who holds it, until when."""
        return render_claims(self.kb.claims_list())

    def kiwi_eligible(
        self,
        limit: Annotated[
            int,
            number(MCP_ELIGIBLE_LIMIT),
            NUMBER,
            Field(description="Max results (default 10, max 200)."),
        ] = MCP_ELIGIBLE_LIMIT.default,
        path_prefix: Annotated[
            str | None, Field(description="Only under this folder, e.g. 'tasks/'.")
        ] = None,
    ) -> str:
        """Tasks ready to claim: files with status todo that nobody holds, best priority
        first (lowest number)."""
        return render_eligible(self.kb.eligible(limit, path_prefix))
