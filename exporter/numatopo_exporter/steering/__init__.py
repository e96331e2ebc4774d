"""Steer: make the kubelet's device manager give a container the GPUs numatopo assigned.

`choice` decides (pure); `proxy` stands between the kubelet and the vendor's device
plugin and asks `choice` whenever the kubelet asks for a preferred allocation.
"""
