"""kube-scheduler's side of the extender calls, in a process of its own (stdlib only).

`bench_extender.py` starts this and drives it over its stdin and stdout, one JSON
object per line, so that the client's CPU (encoding bodies, the HTTP client, parsing
answers) is not counted as the extender's, as it is not in a cluster:

  * `{"url": ..., "pods": [...], "names": [...]}` sets up a target: one keep-alive
    connection to the extender at `url`, and each pod's filter body (ExtenderArgs
    {Pod, NodeNames}) encoded once. Answer: `{"target": <its number>}`.
  * `{"run": <target>, "times": N}` runs the pod mix N times against that target; a
    cycle is `POST /filter`, its answer parsed for the nodes that passed, and `POST
    /prioritize` with those nodes in a body encoded then (as the scheduler does).
    Answer: `{"latencies": [...], "passed": [...]}`, per cycle its wall time in
    seconds as seen here and how many nodes passed filter.

End of input ends the process.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

HEADERS = {"Content-Type": "application/json"}


class Target:
    """One extender, the pods to send it and the nodes each cycle sends."""

    def __init__(self, url: str, pods: list[dict[str, Any]], names: list[str]) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname or "", parts.port)
        self.pods = pods
        self.filter_bodies = [json.dumps({"Pod": p, "NodeNames": names}).encode() for p in pods]

    def post(self, path: str, body: bytes) -> Any:
        self.connection.request("POST", path, body=body, headers=HEADERS)
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {data[:200]!r}")
        return json.loads(data)

    def cycle(self, at: int) -> int:
        """One scheduling cycle of pod `at`: how many nodes passed filter."""
        passed = self.post("/filter", self.filter_bodies[at])["NodeNames"] or []
        body = json.dumps({"Pod": self.pods[at], "NodeNames": passed}).encode()
        self.post("/prioritize", body)
        return len(passed)


def main() -> None:
    targets: list[Target] = []
    for line in sys.stdin:
        command = json.loads(line)
        if "url" in command:
            targets.append(Target(command["url"], command["pods"], command["names"]))
            answer: dict[str, Any] = {"target": len(targets) - 1}
        else:
            target = targets[command["run"]]
            latencies, passed = [], []
            for _ in range(command["times"]):
                for at in range(len(target.pods)):
                    started = time.perf_counter()
                    passed.append(target.cycle(at))
                    latencies.append(time.perf_counter() - started)
            answer = {"latencies": latencies, "passed": passed}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
