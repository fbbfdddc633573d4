"""What checking parameter types costs: building W1's propspec (N=100) on
the controller, and reading it back from JSON data as a target does before
applying it.  Medians of 30, in milliseconds.

    python3 bench/types_cost.py
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hy  # noqa: E402
import w1  # noqa: E402
import consfig.model.propspec as ps  # noqa: E402

to_data = getattr(ps, hy.mangle("propspec->data"))
from_data = getattr(ps, hy.mangle("data->propspec"))


def median_ms(f, n=30):
    times = []
    for _ in range(n):
        started = time.perf_counter()
        f()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main():
    build = median_ms(lambda: w1.w1(100))
    data = json.loads(json.dumps(to_data(w1.w1(100).propspec)))
    read = median_ms(lambda: from_data(data))
    print(f"build W1 N=100: {build:.2f} ms   read back from data: {read:.2f} ms")


if __name__ == "__main__":
    main()
