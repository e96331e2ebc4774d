"""Topology sources. Each reader turns one kind of input into the same model.

sysfs.py            /sys of a live node or a gathered tree   -> NumatopologySpec
nvml.py             NVIDIA driver (pynvml)                   -> GpuReading
hwloc_xml.py        `lstopo --of xml` output                 -> NumatopologySpec
nvidia_smi_topo.py  `nvidia-smi topo -m` text                -> NumatopologySpec
kubelet.py          kubelet config + cpu_manager_state       -> KubeletReading
merge.py            pure: combine readings into one spec
"""
