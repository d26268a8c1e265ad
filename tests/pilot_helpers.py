"""What the TUI tests share: waiting, with a backstop, for the app to reach a state; running a
command from the palette once it is the one on offer; a picture that has stopped changing."""

import time

# A wait ends when its condition holds; the backstop only stops a test that would otherwise hang.
# It is long because a busy 2-core CI machine took 5 to 20 times as long as an idle one.
BACKSTOP_S = 120.0


async def wait_until(pilot, predicate, timeout_s: float = BACKSTOP_S) -> bool:
    """Let the app run until `predicate()` holds; the last check decides. `timeout_s` is a
    backstop against a hang, never a budget: a shorter one is raised to BACKSTOP_S."""
    deadline = time.monotonic() + max(timeout_s, BACKSTOP_S)
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def palette_choice(app) -> str:
    """The first line of the command-palette entry that enter would run ('' if none)."""
    from textual.command import CommandList

    commands = app.screen.query(CommandList)
    if not commands or commands.first().highlighted is None:
        return ""
    listing = commands.first()
    prompt = listing.get_option_at_index(listing.highlighted).prompt
    return str(getattr(prompt, "plain", prompt)).splitlines()[0]


async def run_from_palette(pilot, query: str, command: str) -> None:
    """Type `query` into the open palette, wait until the entry on offer is `command` (its first
    line starts so), then press enter. The palette searches in a worker: enter pressed before that
    search ended ran whatever it had found so far, or nothing."""
    from textual.command import CommandInput

    await pilot.press(*query)
    app = pilot.app
    offered = lambda: (app.screen.query(CommandInput) and app.screen.query_one(CommandInput).value == query
                       and palette_choice(app).startswith(command))
    assert await wait_until(pilot, offered), f"the palette offers {palette_choice(app)!r} for {query!r}"
    await pilot.press("enter")


def underlines_placed(screen) -> bool:
    """Every tab strip's underline lies under its active tab. Textual places it after a refresh
    (and slides it there), so a picture taken before then shows it at the strip's start."""
    from textual.widgets import Tabs

    for tabs in screen.query(Tabs):
        active = tabs.active_tab
        if active is None or not tabs.is_on_screen:
            continue  # a hidden strip keeps its underline where it was
        start, end = active.virtual_region.shrink(active.styles.gutter).column_span
        if end <= start:
            return False  # not laid out yet
        underline = tabs.query_one("Underline")
        if (underline.highlight_start, underline.highlight_end) != (start, end):
            return False
    return True


def screen_lines(app) -> list[str]:
    """What the terminal shows now, one string per line (the screen's compositor, as drawn)."""
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]


async def picture_settled(pilot, frames: int = 3) -> None:
    """Wait until the screen's picture is the same `frames` times in a row, a pause between
    each: workers (the GPU probe, telemetry, a git read) and layout land after the condition a
    test waited for, and sooner or later depending on the machine's load."""
    app = pilot.app
    last, same = None, 0
    deadline = time.monotonic() + BACKSTOP_S
    while same < frames:
        assert time.monotonic() < deadline, "the picture kept changing"
        await pilot.pause(0.1)
        await pilot.wait_for_scheduled_animations()
        picture = app.export_screenshot()
        same = same + 1 if picture == last else 1
        last = picture
