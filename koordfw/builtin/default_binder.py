"""default_binder: binds through the engine (in memory, or a ``pods/binding`` POST on a live cluster),
writing the annotations that pre_bind plugins asked for."""

from koordfw import hookimpl


@hookimpl
async def bind(pod, node, state, handle):
    await handle.bind_pod(pod, node.name, dict(state.annotations))
    return True
