"""What the TUI tests share: waiting, with a bound, for the app to reach a state."""


async def wait_until(pilot, predicate, timeout_s: float = 20.0) -> bool:
    """Let the app run until `predicate()` holds or `timeout_s` passes; the last check decides."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()
