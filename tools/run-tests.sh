#!/usr/bin/env bash
# run-tests.sh — the one command that runs every ckptfs test on a fresh Debian 12 machine:
# installs dependencies (apt + the Python packages of the interop tests), builds twice
# (optimised, and ASan+UBSan) and runs every suite in both (the Python package's in the
# optimised one only: pip builds its own library), the unit suite also under valgrind.  With
# torch installed it regenerates every fixture with real torch (while the optimised build's
# other suites run): that build's fixture-reading suites (cli, reader, mount, python) check
# the reader against those fresh files, the ASan+UBSan and valgrind runs against the committed
# ones.  Sanitizer builds run the long sweeps short (tests/lib/sweep.py).
# Last, compiles the tree at -O3 (release) with gcc and with clang, so neither compiler nor
# optimisation level breaks -Werror.
# Ends with a line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

./tools/install-deps.sh --python || { echo "run-tests: dependency installation failed"; exit 1; }

passed=0
failed=0
tally() { # tally BUILD_DIR [LOG]: adds the results of the last `meson test` in BUILD_DIR
  # (LOG: testlog-valgrind for a run under --wrap=valgrind, which meson logs under that name)
  local counts
  counts=$(python3 - "$1/meson-logs/${2:-testlog}.json" <<'PY'
import json, sys
ok = bad = 0
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r.get("result") in ("OK", "EXPECTEDFAIL", "SKIP"): ok += 1
        else: bad += 1
except FileNotFoundError:
    bad += 1
print(ok, bad)
PY
)
  passed=$((passed + ${counts% *}))
  failed=$((failed + ${counts#* }))
}

step() { echo; echo "=== $*"; }

step "build (debugoptimized)"
[ -d build ] || meson setup build >/dev/null || exit 1
ninja -C build || exit 1

# Fixtures made afresh with the real torch installed here: the debugoptimized run reads them
# (the suites that read fixtures: cli, reader, mount, python), the ASan+UBSan and valgrind
# runs read the committed ones, so both sets are checked and no suite runs twice in one build.
# The generators (one core, mostly torch) run while the other suites' tests do.
fresh=""
regen=""
if python3 -c "import torch" 2>/dev/null; then
  step "fixtures regenerated with real torch $(python3 -c 'import torch; print(torch.__version__)'), beside the tests below"
  fresh=$(mktemp -d)
  regen_log="$fresh.log"
  # torch-checkpointing's fixtures too, when it is installed (the generator skips, exit 0,
  # without it: the committed ones are then what the suites test)
  (python3 tests/fixtures/generate.py --out "$fresh" &&
    python3 tests/fixtures/generate_torch_checkpointing.py --out "$fresh/tc") >"$regen_log" 2>&1 &
  regen=$!
else
  echo "run-tests: torch not importable; skipped the cross-check against fresh fixtures"
fi

if [ -n "$regen" ]; then
  step "tests (debugoptimized), all but the fixture-reading suites"
  meson test -C build --print-errorlogs --num-processes 2 \
    --no-suite cli --no-suite reader --no-suite mount --no-suite python
  tally build
  if wait "$regen"; then
    echo "fixtures: $(ls "$fresh" | wc -l) written to $fresh"
  else
    tail -30 "$regen_log"
    echo "run-tests: fixture regeneration FAILED (the suites below read the committed fixtures)"
    failed=$((failed + 1))
    rm -rf "$fresh"
    fresh=""
  fi
  rm -f "$regen_log"
fi

fixture_suites=(--suite cli --suite reader --suite mount --suite python)
if [ -n "$fresh" ]; then
  tc_fresh=tests/fixtures/torch-checkpointing
  [ -d "$fresh/tc" ] && tc_fresh="$fresh/tc"
  step "tests (debugoptimized), the fixture-reading suites against the fresh fixtures"
  # the Python package's suite (a wheel build, then torch jobs) as a second meson run beside
  # the others (its own log), so the mount tests, which run one at a time, need not wait
  CKPT_FIXTURES="$fresh" CKPT_TC_FIXTURES="$(realpath "$tc_fresh")" \
    meson test -C build --no-rebuild --print-errorlogs --suite python --logbase testlog-python &
  py=$!
  CKPT_FIXTURES="$fresh" CKPT_TC_FIXTURES="$(realpath "$tc_fresh")" \
    meson test -C build --no-rebuild --print-errorlogs --num-processes 2 --no-suite python \
    "${fixture_suites[@]}"
  tally build
  wait "$py"
  tally build testlog-python
  rm -rf "$fresh"
elif [ -n "$regen" ]; then
  step "tests (debugoptimized), the fixture-reading suites against the committed fixtures"
  meson test -C build --print-errorlogs --num-processes 2 "${fixture_suites[@]}"
  tally build
else
  step "tests (debugoptimized)"
  meson test -C build --print-errorlogs --num-processes 2
  tally build
fi

step "build (ASan + UBSan)"
[ -d build-asan ] || CC=gcc meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
  -Dbuildtype=debug >/dev/null || exit 1
ninja -C build-asan || exit 1
step "tests (ASan + UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  LSAN_OPTIONS=suppressions=$root/tests/lsan.supp:print_suppressions=0 meson test -C build-asan --print-errorlogs --num-processes 2
tally build-asan

step "unit tests under valgrind"
meson test -C build --suite unit --print-errorlogs --num-processes 2 \
  --wrap="valgrind --trace-children=yes --suppressions=$root/tests/valgrind.supp --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite -q" \
  --test-args='--jobs 1' --timeout-multiplier 10
tally build testlog-valgrind

step "build (release -O3, gcc and clang): compiles warning-free at -O3 with both compilers"
# (gcc -O3 sees truncations and maybe-uninitialized paths the debug builds do not)
[ -d build-release ] || CC=gcc meson setup build-release -Dbuildtype=release >/dev/null || exit 1
if ninja -C build-release; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
if command -v clang >/dev/null; then
  [ -d build-clang ] || CC=clang meson setup build-clang -Dbuildtype=release >/dev/null || exit 1
  if ninja -C build-clang; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
else
  echo "run-tests: clang not installed; skipped"
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
