"""Human-facing views of a `Numatopology`, all pure (spec in, text out).

text.py    short cell texts shared by the views: sizes, id lists, link names
table.py   the `numatopo inspect` summary: node, policies, NUMA nodes, notices
matrix.py  the GPU/NIC matrix in the style of `nvidia-smi topo -m`
svg.py     a self-contained SVG diagram: sockets, NUMA nodes, GPUs, NICs, links
"""
