"""What the template tests of several workloads share about an offline strategy (agents/offline):
the points of its knob space."""

import itertools


def every_point(strategy) -> list[dict]:
    """The strategy's offline space: every knob combination, normalized, without repeats."""
    seen, out = set(), []
    for values in itertools.product(*strategy.knobs.values()):
        knobs = strategy.normalized(dict(zip(strategy.knobs, values)))
        key = tuple(sorted(knobs.items()))
        if key not in seen:
            seen.add(key)
            out.append(knobs)
    return out
