"""The node agent: makes the operator's CPU assignments true in the kernel's cpusets.

cgroups.py       pure: where the kubelet puts pod and container cgroups (v1/v2,
                 systemd/cgroupfs drivers, containerd/CRI-O names, QoS tiers)
cgroupfs.py      I/O: detect the hierarchy, list container cgroups, read/write cpusets
planning.py      pure: desired cpusets from assignments, and the ordered writes
pod_view.py      pure: one pod as the agent reads it, parsed once per watch event
pod_records.py   one record per pod: what is known of it between passes
pods.py          pure: pod views -> assignments to enforce (overlaps refused)
follow.py        pure: the devices a container holds against its assignment
feedback.py      pure: the pod patches (condition, state annotation)
health.py        pure: the spec's devices the kubelet does not list as allocatable
pod_resources.py I/O: the kubelet's PodResources API (what each container holds)
metrics.py       the agent's Prometheus metrics
watch.py         list+watch of this node's pods into the records (backoff, probe)
devices.py       Follow: PodResources holdings, unhealthy devices, a pod's check
node_status.py   the Enforcing verdict (do not fight a `static` kubelet), GPU mode
enforce.py       one pass over the cgroups: locate, plan, write
report.py        read back; the pod's condition, Events, metrics
loop.py          AgentLoop: the watch, and a pass on change and on a timer
serve.py         the `numatopo agent` process (flags, keys, the steering plugin)
"""
