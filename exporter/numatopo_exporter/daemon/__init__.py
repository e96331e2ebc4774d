"""The exporter daemon: keeps `Numatopology/<node>` equal to what discovery reads. `loop` scans on a
udev event (`udev`), a resync or an object change and publishes (`publishing`), backing off
(`numatopo_kube.backoff`); `numatopo_exporter.metrics` serves both node processes' metrics."""
