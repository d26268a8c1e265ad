#!/usr/bin/env bash
# Walk the new user's path through cuco-tui in tmux, at 80x24 and at 160x48, and capture every
# screen: the dashboard of a new search (without a GPU: the banner and a compile-only search),
# the palette (^p), the leaderboard's best candidate (Enter) and back (Esc), the session browser
# (b), an example session's lineage (Enter), a candidate compared with another (c, c), back to the
# dashboard (Esc, Esc: never out of the search), stop (x: it asks; n), then quit (q). Then a
# search in review mode: the proposal and its diff, q with it waiting (it asks; y), the search
# stops and the proposal is kept as unreviewed.
#
# Usage: scripts/tmux-new-user.sh [OUT.txt]      (default: stdout; needs tmux: apt-get install tmux)
#        CUCO_TUI="env PYTHONPATH=$PWD python3 -c 'import sys; from cuco_tui.cli import tui_main; sys.exit(tui_main(sys.argv[1:]))'" \
#            scripts/tmux-new-user.sh OUT.txt    (this checkout's cuco-tui rather than the installed one)
# The sessions it starts under sessions/ are removed afterwards; nothing else is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
export CUCO_SESSIONS_DIR="$PWD/sessions"  # the sessions it starts, where the cleanup below looks
out=${1:-/dev/stdout}
tui=${CUCO_TUI:-cuco-tui}
session=cuco-new-user-$$
before=$(ls sessions 2>/dev/null | sort || true)
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    for s in $(comm -13 <(echo "$before") <(ls sessions 2>/dev/null | sort)); do
        [ -d "sessions/$s/.git" ] && rm -rf "sessions/${s:?}"
    done
}
trap cleanup EXIT
: > "$out" 2>/dev/null || true

shot() {  # shot TITLE SECONDS: wait, then append the pane
    sleep "$2"
    { echo "===== $size · $1"; tmux capture-pane -p -t "$session" 2>/dev/null || echo "(cuco-tui has exited)"; } >> "$out"
}
keys() { for k in "$@"; do tmux send-keys -t "$session" "$k"; sleep 0.5; done; }  # one at a time, as typed
wait_exit() {
    for i in $(seq 1 120); do tmux has-session -t "$session" 2>/dev/null || break; sleep 1; done
    if tmux has-session -t "$session" 2>/dev/null; then echo "===== $size · still running 120 s after $1" >> "$out"
    else echo "===== $size · exited $i s after $1" >> "$out"; fi
}

for size in 80x24 160x48; do
    w=${size%x*}; h=${size#*x}
    tmux new -d -s "$session" -x "$w" -y "$h" -c "$PWD" "$tui"
    shot "cuco-tui, 25 s after start" 25
    keys C-p; shot "^p: every action by name" 2
    keys Escape Enter; shot "Enter: the leaderboard's first candidate" 5
    keys Escape; shot "Esc: back to the dashboard" 2
    keys b; shot "b: browse sessions and examples" 4
    keys Enter; shot "Enter: the first entry's lineage (machine in the header)" 8
    keys c Down c; shot "c, Down, c: two candidates side by side, then the diff" 6
    keys Escape; shot "Esc: back to the lineage" 2
    keys Escape; shot "Esc: back to the dashboard" 2
    keys Escape; shot "Esc again: still the dashboard" 2
    keys x; shot "x: stop asks first" 2
    keys n; shot "n: the search goes on" 2
    keys q; shot "q: the search stops; what runs is committed" 2
    wait_exit q

    tmux new -d -s "$session" -x "$w" -y "$h" -c "$PWD" "$tui --review review"
    shot "cuco-tui --review review: a proposal and its diff" 30
    keys q; shot "q with a proposal waiting: it asks" 2
    keys y; shot "y: stop, keep it as unreviewed, quit" 2
    wait_exit y
done
