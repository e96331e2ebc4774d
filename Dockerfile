# One image for the three in-cluster processes: `numatopo operator`, `numatopo exporter`
# and `numatopo agent` (the chart picks the command).
#
#   docker build -t ghcr.io/numatopo/numatopo:0.1.0 .
#
# The base is pinned to an exact Python patch release and Debian release; pin it to a
# digest as well (`--build-arg BASE=python:3.11.13-slim-bookworm@sha256:...`) for
# reproducible builds in your registry.
#
# Users: the image runs as uid 65532 (nonroot). The operator keeps it. The node pods
# override it to uid 0 with every capability dropped: the agent writes root-owned
# cgroup files in place, and the exporter reads the kubelet's 0750 state directory.

ARG BASE=python:3.11.13-slim-bookworm

FROM ${BASE} AS build
WORKDIR /src
# Only what the wheel needs (see .dockerignore): a change to tests or docs keeps the cache.
COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY kube/ kube/
COPY operator/ operator/
COPY exporter/ exporter/
COPY cli/ cli/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
# libudev1: pyudev's device database and hot-plug monitor; hwloc is not needed in the
# cluster (sysfs is read directly).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libudev1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-compile /wheels/*.whl && rm -rf /wheels \
    && numatopo --help >/dev/null
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 65532:65532
ENTRYPOINT ["numatopo"]
CMD ["--help"]
