"""Node score, 0..100, for choosing between nodes that can all host a pod (higher is better).

    score = round(100 * (w_span*span + w_links*links + w_pack*pack) / (w_span + w_links + w_pack))

span   = min_width / width: the fewest NUMA nodes the request could use on this node's hardware
         over the NUMA nodes the placement spans (1.0 also when nothing NUMA-bound was placed).
links  = bandwidth(chosen GPUs) / bandwidth(best set of as many GPUs on this hardware), summing
         `gpuLinks` bandwidth over pairs; 1.0 for fewer than 2 GPUs or no direct links at all.
pack   = how full the touched NUMA nodes are after the placement, averaged over the kinds of
         device the pod takes (GPUs, exclusive CPUs): used / capacity within the mask. Best
         fit keeps whole NUMA nodes and NVLink cliques free for the next large job.

Weights: with GPUs, w_span=30, w_links=40, w_pack=30: link type drives GPU placement, so on an
NVSwitch machine a pod spanning both NUMA nodes with full bandwidth still scores 85, not a failure;
without GPUs, w_span=60, w_links=0, w_pack=40.

`decision` computes these terms for every node of a shape at once (`_compose`); the scalar formula
(`placement_score`, `compose_score`) is its test oracle, `tests/engine/allocation/score_oracle.py`.
"""

from __future__ import annotations

GPU_WEIGHTS = (30, 40, 30)
CPU_WEIGHTS = (60, 0, 40)
