"""Topology sources, each reader turning one kind of input into the same model (`sysfs`, `nvml`,
`hwloc_xml`, `nvidia_smi_topo`, `kubelet`; README, "`numatopo inspect`"); `discover` chooses them
and combines their readings into one spec (its merges are pure).
"""
