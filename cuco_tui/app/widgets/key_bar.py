"""The keys of the screen at its foot, on as many lines as they need: Textual's Footer is one
line and cuts what does not fit (at 80 columns the dashboard lost half its keys, at 120 the
lineage its last ones). Same order and looks as the Footer: the focused widget's keys, then the
screen's, then the app's, one entry per action, an action turned off dimmed, ^p palette last.
A click on an entry presses its key."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.events import Click
from textual.geometry import Size
from textual.widget import Widget

GAP = 2  # cells between two entries


@dataclass(frozen=True)
class KeyEntry:
    key: str  # the key a click presses
    shown: str  # how the key is written ("q", "^p", "/")
    description: str
    enabled: bool

    @property
    def width(self) -> int:
        return len(self.shown) + 1 + len(self.description)


def pack(entries: list[KeyEntry], width: int) -> list[list[KeyEntry]]:
    """The entries in order, on as few lines of `width` cells as they fit (one at least)."""
    lines: list[list[KeyEntry]] = [[]]
    used = 0
    for entry in entries:
        need = entry.width + (GAP if lines[-1] else 0)
        if lines[-1] and used + need > width:
            lines.append([])
            used, need = 0, entry.width
        lines[-1].append(entry)
        used += need
    return lines


class KeyBar(Widget):
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: auto;
        padding: 0 1;
        color: $footer-foreground;
        background: $footer-background;
    }
    """

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen) -> None:
        self.refresh(layout=True)

    def entries(self) -> list[KeyEntry]:
        """The keys shown, as the Footer would show them."""
        seen: set[str] = set()
        out = []
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            out.append(KeyEntry(binding.key, self.app.get_key_display(binding), binding.description, active.enabled))
        palette = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if self.app.ENABLE_COMMAND_PALETTE and palette is not None:
            out.append(KeyEntry(palette.binding.key, self.app.get_key_display(palette.binding), "palette", True))
        return out

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(pack(self.entries(), width))

    def render(self) -> Content:
        lines = []
        for line in pack(self.entries(), self.content_size.width):
            parts: list[Content | str | tuple[str, str]] = []
            for i, entry in enumerate(line):
                dim = "" if entry.enabled else " dim"
                parts += [" " * GAP if i else "", (entry.shown, "bold $footer-key-foreground" + dim),
                          (" " + entry.description, "$footer-description-foreground" + dim)]
            lines.append(Content.assemble(*parts))
        return Content("\n").join(lines)

    def on_click(self, event: Click) -> None:
        lines = pack(self.entries(), self.content_size.width)
        x, y = event.x - self.styles.padding.left, event.y
        if not 0 <= y < len(lines):
            return
        start = 0
        for entry in lines[y]:
            if start <= x < start + entry.width:
                if entry.enabled:
                    self.app.simulate_key(entry.key)
                else:
                    self.app.bell()
                return
            start += entry.width + GAP
