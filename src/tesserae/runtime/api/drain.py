"""Draining a node (admins only): ``POST /v1/nodes/{name}/drain`` keeps new runs off its GPUs while
the runs already there go on until they end (Slurm's drain); ``POST /v1/nodes/{name}/undrain`` puts it
back in service. The drain is kept in the store (``store.nodes``), so it outlives a restart; the
scheduler places around it (``tesserae.fencing``). The dashboard's node health section posts here
through its own CSRF-checked forms.
"""

import time
from typing import Annotated, Any

from fastapi import Body, FastAPI, HTTPException
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from tesserae.runtime.api.auth import require_admin
from tesserae.runtime.api.limits import SafeStr
from tesserae.runtime.api.models import MAX_NODE_NAME, NODE_NAME_PATTERN
from tesserae.runtime.controller.loop import Controller
from tesserae.runtime.controller.node_fences import find_node, namesakes
from tesserae.runtime.store import nodes as drained_nodes

NodeName = Annotated[str, PathParam(min_length=1, max_length=MAX_NODE_NAME, pattern=NODE_NAME_PATTERN,
                                    description="The node's name or id, as GET /v1/nodes shows it.")]


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reason: SafeStr = Field("", max_length=200, description="Why (shown beside the node).")


def add_drain_routes(app: FastAPI, controller: Controller, Who: Any) -> None:
    store = controller.store

    @app.post("/v1/nodes/{name}/drain", tags=["cluster"])
    def drain(name: NodeName, who: Who, req: Annotated[DrainRequest | None, Body()] = None) -> dict[str, Any]:
        """Keep new runs off the node's GPUs; its running jobs go on (admins only). Draining a drained
        node is no error (its first drain's time and reason stay)."""
        require_admin(who, "drain or undrain a node")
        view = controller.executor.nodes()
        same = namesakes(view, name)
        if same:
            raise HTTPException(409, f"{len(same)} nodes are called '{name}': give one's id "
                                     f"({', '.join(n.id for n in same[:8])})")
        node = find_node(view, name)
        if node is None:
            raise HTTPException(404, f"there is no node '{name}' in the cluster (GET /v1/nodes lists them)")
        key = node.id if namesakes(view, node.name) else node.name  # a name several nodes share: the id
        added = drained_nodes.drain(store, key, who.user, (req or DrainRequest()).reason, time.time())
        controller.wake()
        return {"node": node.name, "drained": True, "changed": added}

    @app.post("/v1/nodes/{name}/undrain", tags=["cluster"])
    def undrain(name: NodeName, who: Who) -> dict[str, Any]:
        """Put a drained node back in service (admins only)."""
        require_admin(who, "drain or undrain a node")
        node = find_node(controller.executor.nodes(), name)
        known = drained_nodes.drained(store)
        key = node.name if node is not None and node.name in known else name
        if key not in known:
            if node is None:
                raise HTTPException(404, f"there is no node '{name}' in the cluster, and none of that name is "
                                         "drained")
            return {"node": node.name, "drained": False, "changed": False}
        drained_nodes.undrain(store, key, who.user, time.time())
        controller.wake()
        return {"node": key, "drained": False, "changed": True}
