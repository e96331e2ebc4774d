"""`numatopo simulate`'s core: replay a GPU-cluster trace under several placement strategies.

Pure: the CLI reads the files and passes rows in. Modules:
  trace          trace rows (Alibaba cluster-trace-gpu-v2023 format) and the replayed workload
  layouts        GPU model -> real node layout (NUMA, NVLink) -> `NumatopologySpec`
  cluster        per-node counters shared by every strategy
  fragmentation  FGD-style GPU fragmentation against the workload's requests (numatopo's
                 tie-break for pods the engine does not rank)
  strategies     the strategies compared
  metrics        what is measured; the JSON keys are documented there
  replay         `simulate()`: one fresh cluster per strategy
  mig_pool       `--mig-pool`: some nodes split into MIG devices, small shared pods mapped there
  leafspine      synthetic leaf/spine clusters of real node shapes, and their cluster file
  gangs          `simulate --multi-node`: multi-node jobs placed on such a cluster
  fleet          many nodes of a few shapes, each with its own node name and GPU UUIDs
"""
