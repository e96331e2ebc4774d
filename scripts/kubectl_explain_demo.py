"""Print `kubectl numatopo explain` for a pod refused on most nodes (README's sample).

Runs against kmock's Kubernetes emulator over real HTTP, with the real operator filling
the busy nodes (the scene of tests/operator/test_kubectl_plugin.py):

    .venv/bin/python scripts/kubectl_explain_demo.py [BUSY_NODES]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import kmock  # noqa: E402
from tests.operator import conftest  # noqa: E402
from tests.operator.kubectl_scene import assigned, build, run_plugin  # noqa: E402

import signing_keys  # noqa: E402


async def demo(busy: int) -> str:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api):
        conftest.register_resources(api)
        cluster = conftest.Cluster(api)
        starter = conftest.OperatorStarter()
        try:
            pods = await build(
                cluster, conftest.h100_spec(), conftest.numatopology, conftest.make_pod,
                busy=busy, free=2,
            )  # fmt: skip
            await starter.start(cluster)
            await conftest.eventually(lambda: assigned(cluster, pods), what="assigned", timeout=120)
            await cluster.create_pod(conftest.make_pod("big-job", node=None, cpu="8", gpus=4))
            keys = Path(tempfile.mkdtemp()) / "trusted.pem"
            keys.write_bytes(signing_keys.PUBLIC_PEM)
            _, out, _ = await run_plugin(
                "--api-url", str(api.url), "--trusted-keys", str(keys), "explain", "big-job"
            )
            return out
        finally:
            await starter.stop_all()


if __name__ == "__main__":
    print(asyncio.run(demo(int(sys.argv[1]) if len(sys.argv) > 1 else 24)), end="")
