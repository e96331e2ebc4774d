"""Dynamic Resource Allocation (`resource.k8s.io/v1`): DRA devices read as topology, and the claims
of a pod decided on it (pure; the operator does the I/O).

  api        the wire models of the objects read and written (only the fields used)
  join       ResourceSlices joined with a node's Numatopology: each device as a GPU/NIC
  selectors  device selectors (CEL) evaluated as the scheduler's allocator does, or refused
  claims     a pod's claims decided with the engine, as claim allocations
  allocated  claims kube-scheduler allocated, read back as each container's devices
  extended   extended resources DRA serves (KEP-5004): which class serves a name
  pods       whether a pod's devices come from its claims alone (the agent reads it)
"""
