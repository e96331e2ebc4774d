"""Human-facing views, all pure (data in, text out): `text` (short cell texts the views share),
`table` (the `numatopo inspect` summary), `matrix` (the GPU/NIC matrix of `nvidia-smi topo -m`),
`svg` (one node's diagram), `domains` (`numatopo domains`' tree as a table and an SVG picture) and
`cluster_svg` (`kubectl numatopo nodes --svg`: one card per node, free of total)."""
