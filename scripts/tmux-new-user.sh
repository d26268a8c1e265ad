#!/usr/bin/env bash
# Start cuco-tui in tmux the way a new user would, and capture what it shows: the dashboard of
# a new search (on a machine without a GPU: the banner and a compile-only search), the session
# browser (`b`), an example session's lineage (Enter), and the dashboard again (Esc).
# Usage: scripts/tmux-new-user.sh [OUT.txt]   (default: stdout)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/dev/stdout}
session=cuco-new-user-$$
trap 'tmux kill-session -t "$session" 2>/dev/null || true' EXIT
tmux new -d -s "$session" -x 120 -y 40 -c "$PWD" 'cuco-tui'
shot() { sleep "$2"; { echo "===== $1 ($(date +%T))"; tmux capture-pane -p -t "$session"; } >> "$out"; }
: > "$out" 2>/dev/null || true
shot "cuco-tui, 25 s after start" 25
tmux send-keys -t "$session" b; shot "b: browse sessions" 4
tmux send-keys -t "$session" Enter; shot "Enter: the first entry's lineage" 8
tmux send-keys -t "$session" Escape; shot "Esc: back to the dashboard" 3
tmux send-keys -t "$session" q; shot "q: the search stops, what is in flight finishes" 2
for i in $(seq 1 120); do tmux has-session -t "$session" 2>/dev/null || break; sleep 1; done
if tmux has-session -t "$session" 2>/dev/null; then echo "===== still running 120 s after q" >> "$out"
else echo "===== exited $i s after q" >> "$out"; fi
