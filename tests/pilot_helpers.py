"""What the TUI tests share: waiting, with a bound, for the app to reach a state."""


async def wait_until(pilot, predicate, timeout_s: float = 20.0) -> bool:
    """Let the app run until `predicate()` holds or `timeout_s` passes; the last check decides."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


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
