"""kube-scheduler's side of the extender calls, in a process of its own (stdlib only).

`bench_extender.py` starts this and drives it over its stdin and stdout, one JSON
object per line, so that the client's CPU (encoding bodies, TLS, the HTTP client,
parsing answers) is not counted as the extender's, as it is not in a cluster:

  * `{"url": ..., "pods": [...], "names": [...], "send": N | null, "tls": {...} | null}`
    sets up a target: one keep-alive connection to the extender at `url` (HTTPS with
    a client certificate when `tls` names `ca`, `cert` and `key` files, as
    kube-scheduler's `extenders[].tlsConfig` does), the pods to send and the nodes.
    `send`: each cycle sends the next N of `names`, starting where the last cycle
    stopped (wrapping around), as kube-scheduler's percentageOfNodesToScore does;
    null sends every name each cycle. Answer: `{"target": <its number>}`.
  * `{"run": <target>, "times": N}` runs the pod mix N times against that target; a
    cycle is `POST /filter` with ExtenderArgs {Pod, NodeNames} (encoded then, as the
    scheduler does), its answer parsed for the nodes that passed, and `POST
    /prioritize` with those nodes. Answer: `{"latencies": [...], "passed": [...],
    "starts": [...], "chosen": [...]}`, per cycle its wall time in seconds as seen
    here, how many nodes passed filter, where in `names` its nodes started, and the
    node with the best score ("" when none passed).

End of input ends the process.
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import time
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

HEADERS = {"Content-Type": "application/json"}
T = TypeVar("T")


class Rotation(Generic[T]):
    """kube-scheduler's walk over its node list: each cycle the next `send` nodes,
    starting where the last cycle stopped, wrapping around the end."""

    def __init__(self, names: list[T], send: int | None) -> None:
        self.names = names
        self.send = len(names) if send is None else min(send, len(names))
        self.start = 0

    def next(self) -> tuple[int, list[T]]:
        """Where this cycle's nodes start in `names`, and the nodes."""
        start, end = self.start, self.start + self.send
        taken = self.names[start:end]
        if end > len(self.names):
            taken += self.names[: end - len(self.names)]
        self.start = end % len(self.names) if self.names else 0
        return start, taken


def tls_context(tls: dict[str, str]) -> ssl.SSLContext:
    """kube-scheduler's tlsConfig: the server checked against `ca`, `cert`/`key` shown."""
    context = ssl.create_default_context(cafile=tls["ca"])
    context.load_cert_chain(tls["cert"], tls["key"])
    return context


class Target:
    """One extender, the pods to send it and the nodes the cycles walk through."""

    def __init__(
        self,
        url: str,
        pods: list[dict[str, Any]],
        names: list[str],
        send: int | None,
        tls: dict[str, str] | None,
    ) -> None:
        parts = urlsplit(url)
        self.connection: http.client.HTTPConnection
        if parts.scheme == "https":
            context = tls_context(tls or {})
            self.connection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, context=context
            )
        else:
            self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port)
        self.pods = pods
        self.rotation: Rotation[str] = Rotation(names, send)

    def post(self, path: str, body: bytes) -> Any:
        self.connection.request("POST", path, body=body, headers=HEADERS)
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {data[:200]!r}")
        return json.loads(data)

    def cycle(self, at: int) -> tuple[int, int, str]:
        """One scheduling cycle of pod `at`: where its nodes started, how many passed
        filter, and the best-scored node."""
        start, names = self.rotation.next()
        body = json.dumps({"Pod": self.pods[at], "NodeNames": names}).encode()
        passed = self.post("/filter", body)["NodeNames"] or []
        body = json.dumps({"Pod": self.pods[at], "NodeNames": passed}).encode()
        scored = self.post("/prioritize", body)
        # kube-scheduler picks among the best at random; the first one is as good here.
        best = max(scored, key=lambda host: host["Score"], default={"Host": ""})
        return start, len(passed), best["Host"]


def main() -> None:
    targets: list[Target] = []
    for line in sys.stdin:
        command = json.loads(line)
        if "url" in command:
            targets.append(
                Target(
                    command["url"],
                    command["pods"],
                    command["names"],
                    command.get("send"),
                    command.get("tls"),
                )
            )
            answer: dict[str, Any] = {"target": len(targets) - 1}
        else:
            target = targets[command["run"]]
            answer = {"latencies": [], "passed": [], "starts": [], "chosen": []}
            for _ in range(command["times"]):
                for at in range(len(target.pods)):
                    started = time.perf_counter()
                    start, passed, chosen = target.cycle(at)
                    answer["latencies"].append(time.perf_counter() - started)
                    answer["passed"].append(passed)
                    answer["starts"].append(start)
                    answer["chosen"].append(chosen)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
