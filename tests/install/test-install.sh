#!/usr/bin/env bash
# Installs cllm into a temporary prefix and consumes it as a user would:
# builds examples/simple.c and examples/chat.c with `pkg-config --cflags
# --libs cllm` (shared, and simple also fully static with --static) and with
# find_package(cllm), checks that simple's 32 greedy tokens are the ones of
# `cllm run --temp 0 -n 32 --json` on the same prompt, runs chat on two
# piped lines (the second turn must continue the session's KV cache), and
# batch on three prompts at once (each answer cllm run's alone).
#
#   tests/install/test-install.sh [SOURCE_DIR] [BUILD_DIR]
#
# Exit status 0: passed; 77: skipped (no test model or no pkg-config; 1
# instead when CLLM_REQUIRE_TEST_DATA is set, as in CI); anything else:
# failed. The model is looked for in CLLM_TEST_DATA_DIR if set, else in
# tests/data/models.
set -euo pipefail

src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
build=$(cd "${2:-$src/build}" && pwd)
model="${CLLM_TEST_DATA_DIR:-$src/tests/data/models}/stories260K.gguf"
skip=77
case "${CLLM_REQUIRE_TEST_DATA:-}" in "" | 0) ;; *) skip=1 ;; esac
prompt="Once upon a time"

if [ ! -f "$model" ]; then
  echo "test-install: skipped: no test model ($model)"
  exit $skip
fi
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "test-install: skipped: pkg-config is not installed (apt-get install pkg-config)"
  exit $skip
fi
cc=${CC:-cc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

fail() {
  echo "test-install: FAILED: $*" >&2
  exit 1
}

echo "== install into a temporary prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/cllm.h lib/libcllm.a lib/pkgconfig/cllm.pc lib/cmake/cllm/cllmConfig.cmake \
  lib/cmake/cllm/cllmConfigVersion.cmake bin/cllm; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
if [ -d "$prefix/include/cllm" ] || ls "$prefix"/include | grep -qv '^cllm.h$'; then
  fail "headers other than cllm.h were installed"
fi

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
warn=(-std=c11 -Wall -Wextra -Wpedantic -Werror)

echo "== build the examples with pkg-config"
# shellcheck disable=SC2046
"$cc" "${warn[@]}" "$src/examples/simple.c" $(pkg-config --cflags --libs cllm) -o "$tmp/simple"
# shellcheck disable=SC2046
"$cc" "${warn[@]}" "$src/examples/chat.c" $(pkg-config --cflags --libs cllm) -o "$tmp/chat"
# shellcheck disable=SC2046
"$cc" "${warn[@]}" "$src/examples/batch.c" $(pkg-config --cflags --libs cllm) -o "$tmp/batch"
# fully static libcllm: Libs.private must be enough
static_flags=$(pkg-config --static --cflags --libs cllm | sed 's/-lcllm\b/-l:libcllm.a/')
# shellcheck disable=SC2086
"$cc" "${warn[@]}" "$src/examples/simple.c" $static_flags -o "$tmp/simple-static"

echo "== build the examples with find_package(cllm)"
cmake -S "$src/examples" -B "$tmp/examples-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/examples-build" >/dev/null

ids_of_simple() { # the ids after "generated_ids:"
  "$@" "$model" "$prompt" | sed -n 's/^generated_ids: *//p'
}

echo "== simple against cllm run --temp 0"
ref=$("$prefix/bin/cllm" run -m "$model" -p "$prompt" --temp 0 -n 32 --json |
  python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["generated_ids"])))')
[ -n "$ref" ] || fail "cllm run gave no generated ids"
[ "$(echo "$ref" | wc -w)" -eq 32 ] || fail "cllm run gave $(echo "$ref" | wc -w) ids, not 32"
for exe in "$tmp/simple" "$tmp/simple-static" "$tmp/examples-build/simple"; do
  got=$(ids_of_simple "$exe")
  if [ "$got" != "$ref" ]; then
    fail "$(basename "$exe") generated [$got], cllm run [$ref]"
  fi
  echo "   ${exe#"$tmp"/}: the same 32 ids"
done

echo "== chat on two piped lines"
printf 'Hello there.\nTell me a story.\n' | "$tmp/chat" "$model" chatml >"$tmp/chat.out" \
  2>"$tmp/chat.err" || { cat "$tmp/chat.err" >&2; fail "chat exited with an error"; }
[ "$(grep -c '^assistant: ' "$tmp/chat.out")" -eq 2 ] || fail "chat did not answer twice"
grep -q '^\[continued: ' "$tmp/chat.err" || fail "the second turn did not continue the session"
"$tmp/examples-build/chat" "$model" chatml </dev/null || fail "chat (find_package) failed"

echo "== batch: three prompts at once, each answered as cllm run answers it alone"
"$tmp/batch" "$model" "$prompt" "The dog" "Lily saw a bird" >"$tmp/batch.out" ||
  fail "batch exited with an error"
for p in "$prompt" "The dog" "Lily saw a bird"; do
  "$prefix/bin/cllm" run -m "$model" -p "$p" --temp 0 -n 48 -c 512 2>/dev/null >"$tmp/run.out"
  # the text up to the stop string "\n\n", as batch prints it
  python3 -c 'import sys
p, run, out = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
sys.exit(0 if "[%s]%s (" % (p, run.split("\n\n")[0]) in out else 1)' "$p" "$tmp/run.out" \
    "$tmp/batch.out" || fail "batch's answer to '$p' is not cllm run's"
done
"$tmp/examples-build/batch" "$model" "$prompt" >/dev/null || fail "batch (find_package) failed"

echo "test-install: passed"
