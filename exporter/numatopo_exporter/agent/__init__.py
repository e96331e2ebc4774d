"""The node agent: makes the operator's CPU assignments true in the kernel's cpusets.

cgroups.py    pure: where the kubelet puts pod and container cgroups (v1/v2,
              systemd/cgroupfs drivers, containerd/CRI-O names, QoS tiers)
cgroupfs.py   I/O: detect the hierarchy, list container cgroups, read/write cpusets
planning.py   pure: desired cpusets from assignments, and the ordered writes
pods.py       pure: pod bodies -> assignments to enforce (overlaps refused)
feedback.py   pure: the pod patches (condition, state annotation)
kubelet.py    I/O: the kubelet's CPU manager policy (do not fight `static`)
metrics.py    the agent's Prometheus metrics
loop.py       list+watch of this node's pods, reconcile on change and on a timer
"""
