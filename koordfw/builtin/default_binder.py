"""default_binder: binds through the engine (in memory, or a ``pods/binding`` POST on a live cluster),
writing the annotations that pre_bind plugins asked for."""

from koordfw import CycleState, Handle, NodeView, Pod, hookimpl


@hookimpl
async def bind(pod: Pod, node: NodeView, state: CycleState, handle: Handle) -> bool:
    await handle.bind_pod(pod, node.name, dict(state.annotations))
    return True
