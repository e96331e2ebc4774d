"""Human-facing views, all pure (data in, text out).

text.py         short cell texts shared by the views: sizes, id lists, link names
table.py        the `numatopo inspect` summary: node, policies, NUMA nodes, notices
matrix.py       the GPU/NIC matrix in the style of `nvidia-smi topo -m`
svg.py          a self-contained SVG diagram: sockets, NUMA nodes, GPUs, NICs, links
domains.py      `numatopo domains`: the domain tree as a table and as an SVG picture
cluster_svg.py  `kubectl numatopo nodes --svg`: one card per node, free of total
"""
