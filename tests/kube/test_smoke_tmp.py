import anyio
from conftest import node, pod
from koordfw.engines.kube.engine import KubeSchedulerEngine


async def test_smoke(api, client, registry):
    for i in range(3):
        api.create(node(f"n{i}"))
    for i in range(10):
        api.create(pod(f"p{i}"))
    eng = KubeSchedulerEngine(registry, client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(eng.run)
        with anyio.fail_after(10):
            while len(api.bind_log) < 10:
                await anyio.sleep(0.05)
        eng.stop()
    assert len({u for u, _ in api.bind_log}) == 10
