#!/usr/bin/env bash
# Renders pictures (SVG charts, the demo's timeline, the compare HTML page) to
# PNG with headless Chromium, to look at them as a browser shows them: labels
# that overlap, text cut off at an edge, colours that do not read. For review
# only: not part of the suite, and Chromium is no dependency of the package
# (Debian: apt-get install -y chromium).
#
#   bash test/bench/render-png.sh [--out DIR] [--width W] [--height H] FILE...
#
# Each FILE.svg/.html becomes DIR/FILE.png (default DIR: the file's own folder).
# An SVG is rendered at its own width and height when it states them.
set -euo pipefail
out='' width=1200 height=900
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --height) height=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "render-png: unknown option $1" >&2; exit 64 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: render-png.sh [--out DIR] [--width W] [--height H] FILE..." >&2; exit 64; }
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "render-png: chromium not found (Debian: apt-get install -y chromium)" >&2; exit 69; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
for file in "$@"; do
  path=$(realpath "$file")
  dir=${out:-$(dirname "$path")}
  mkdir -p "$dir"
  png="$dir/$(basename "${path%.*}").png"
  w=$width h=$height
  if [[ "$path" == *.svg ]]; then
    # The SVG's own size, so the picture is neither cut nor padded.
    head=$(head -c 2000 "$path")
    sw=$(sed -nE 's/^<svg[^>]* width="([0-9.]+)".*/\1/p' <<<"$head" | head -1)
    sh=$(sed -nE 's/^<svg[^>]* height="([0-9.]+)".*/\1/p' <<<"$head" | head -1)
    [ -n "$sw" ] && w=${sw%.*}
    [ -n "$sh" ] && h=${sh%.*}
  fi
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$png" --window-size="$w,$h" "file://$path" >/dev/null 2>&1
  echo "$png (${w}x$h)"
done
