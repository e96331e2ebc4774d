"""The kubelet's gRPC APIs on this node: device plugin v1beta1 and PodResources v1. The `*_pb2*`
modules are generated from the `.proto` files here by `scripts/generate-kubelet-api.sh`; never edit
them by hand."""
