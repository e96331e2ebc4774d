#!/usr/bin/env bash
# Regenerates the Python modules of the kubelet APIs numatopo speaks (device plugin
# v1beta1, podresources v1) from the .proto files beside them. Needs grpcio-tools
# (a test dependency). tests/exporter/kubelet_api/test_generated.py checks they are current.
set -euo pipefail
cd "$(dirname "$0")/../exporter"
python="${PYTHON:-../.venv/bin/python}"
"$python" -m grpc_tools.protoc -I . \
    --python_out=. --pyi_out=. --grpc_python_out=. \
    numatopo_exporter/kubelet_api/deviceplugin.proto \
    numatopo_exporter/kubelet_api/podresources.proto
