"""numatopo's cluster operator (kopf): assigner, ledger, scheduler extender, status writer."""
