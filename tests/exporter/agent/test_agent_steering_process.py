"""`numatopo agent --steer-resource ...` as it runs on a node: the real agent process
entry (`serve`) against the API emulator, the kubelet harness and an NVIDIA-shaped
plugin pointed at numatopo's Registration socket. The kubelet ends up talking to
numatopo's endpoint, the node reports `gpuMode: Steered`, and a pod the operator
assigned (its annotation written by the test) gets exactly its GPUs."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
from pathlib import Path

import kmock

import signing_keys
from kubelet_harness import GPU, Container, FakeGpu, Harness, Pod
from numatopo_cli.main import build_parser
from numatopo_engine.model import API_VERSION, KIND
from numatopo_exporter.agent import serve as agent_command

from ..conftest import NodeClient, numatopology_path
from ..daemon.conftest import NODE
from .conftest import CgroupTree
from .test_agent_loop import wait_for

GPUS = [FakeGpu.numbered(i, i // 2) for i in range(4)]


async def test_the_agent_steers_the_kubelet_to_the_assigned_gpus(
    cluster: kmock.KubernetesEmulator, client: NodeClient, file_cgroups: CgroupTree
) -> None:
    await client.create(
        numatopology_path(),
        {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NODE}, "spec": {}},
    )
    assigned = [GPUS[3].id, GPUS[2].id]  # not what NVIDIA's plugin would pick (lowest IDs)
    assignment = {"v": 1, "node": NODE, "seq": 1,
                  "containers": {"main": {"gpus": assigned, "gpuIndices": [3, 2]}}}  # fmt: skip
    await client.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "train", "namespace": "default", "uid": "uid-train",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"numatopo.io/assignment": signing_keys.signed_annotation(
                    {"metadata": {"uid": "uid-train", "namespace": "default", "name": "train"}},
                    json.dumps(assignment),
                )},
            },
            "spec": {
                "nodeName": NODE,
                "containers": [{"name": "main", "resources": {"limits": {GPU: "2"}}}],
            },
            "status": {"phase": "Pending"},
        },
    )  # fmt: skip
    steering_dir = Path(tempfile.mkdtemp(prefix="steer-", dir="/tmp"))
    key_file = steering_dir / "trusted.pem"
    key_file.write_bytes(signing_keys.PUBLIC_PEM)
    async with Harness(rng=random.Random(1)) as kubelet:
        args = build_parser().parse_args(
            [
                "agent", f"--node-name={NODE}", f"--cgroup-root={file_cgroups.root}",
                f"--kubelet-state={file_cgroups.root / 'absent'}",
                f"--api-url={str(cluster.url).rstrip('/')}", "--metrics-port=0",
                "--resync-seconds=0.2",
                f"--pod-resources-socket={kubelet.pod_resources_socket}",
                f"--steer-resource={GPU}", f"--steer-kubelet-dir={kubelet.plugin_dir}",
                f"--steer-socket-dir={steering_dir}",
                f"--trusted-keys-file={key_file}",
            ]
        )  # fmt: skip
        assert isinstance(args, argparse.Namespace)
        task = asyncio.create_task(agent_command.serve(args))
        try:
            registration = steering_dir / "kubelet.sock"
            await wait_for(registration.exists, "numatopo's Registration socket")
            await kubelet.start_plugin(GPUS, kubelet_socket=registration, wait=False)
            manager = kubelet.kubelet.device_manager
            await wait_for(
                lambda: manager.healthy_devices.get(GPU) == {g.id for g in GPUS},
                "the kubelet sees the GPUs through numatopo", seconds=10,
            )  # fmt: skip

            def mode() -> str | None:
                body = cluster.objects["numatopo.io/v1alpha1/numatopologies", None, NODE].raw
                return (body.get("status") or {}).get("gpuMode")

            await wait_for(lambda: mode() == "Steered", "gpuMode Steered", seconds=10)
            admission = await kubelet.admit(
                Pod("uid-train", "train", containers=(Container("main", {GPU: 2}),))
            )
            assert admission.ok, admission.error
            assert sorted(admission.ids("main")) == sorted(assigned)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            shutil.rmtree(steering_dir, ignore_errors=True)
