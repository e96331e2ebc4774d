"""Other schedulers' views of a node, translated from numatopo's (pure; docs/DESIGN.md, "Exports").

`nrt`      the NodeResourceTopology scheduler-plugins' NodeResourceTopologyMatch reads
`volcano`  the Numatopology Volcano's numaaware plugin reads
`zones`    what both are made of: per NUMA node, what exists, what may be allocated and
           what numatopo's ledger has not booked

Each takes a node's `NumatopologySpec` and its `NodeState` (the operator's ledger) and returns a
pydantic model, the one definition of that wire format here.
"""
