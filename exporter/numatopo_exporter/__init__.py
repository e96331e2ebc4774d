"""numatopo's node side: topology discovery, the exporter daemon and the cpuset agent."""
