"""numatopo's node side: topology discovery, the exporter daemon, the cpuset agent, the CLI."""
