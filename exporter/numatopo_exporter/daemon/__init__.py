"""The exporter daemon: keeps `Numatopology/<node>` equal to what discovery reads.

publishing.py  the object to publish (pure) and the publisher (API I/O through numatopo_kube)
udev.py        kernel device events (pyudev) that trigger a rescan
metrics.py     Prometheus metrics of both node processes and their HTTP endpoint
loop.py        the loop: scan on udev / resync / object change, publish, back off
               (numatopo_kube.backoff)
"""
